# source: https://github.com/ikawrakow/ik_llama.cpp/pull/377 (tests/truth/records/ik-deci-pr377-panchovix-4gpu-nemotron-ultra.yaml)
./llama-server -m /run/media/pancho/08329F4A329F3B9E/models_llm/Llama-3_1-Nemotron-Ultra-253B-v1-UD-Q3_K_XL-00001-of-00003.gguf -c 12228 -ngl 163 -ts 6.5,6,10,4 --no-warmup -fa -ctk q8_0 -ctv q4_0 -mg 2
