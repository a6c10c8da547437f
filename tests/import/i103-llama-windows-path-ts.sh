# source: https://github.com/ikawrakow/ik_llama.cpp/issues/103 (tests/truth/records/ghx-ik-llama-i103-nexesenex-8b-ctk-iq4nl-nofa.yaml)
llama-perplexity -m D:\text-generation-webui\models\Meta_Llama_3.1_8b_it-f16-iMat-Q5_K_S_q4_v6.gguf -f wiki.test.raw --parallel 1 -ngl 150 -b 1024 -ts 40,0 --no-mmap -ctk iq4_nl -c 512 --chunks 211
