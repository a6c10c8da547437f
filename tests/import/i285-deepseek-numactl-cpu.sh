# source: https://github.com/ikawrakow/ik_llama.cpp/issues/285 (tests/truth/records/ghx-main-deepseek2-i285-ubergarm-r1-q8-cpu-amx.yaml)
numactl -N 0 -m 0 \
./build/bin/llama-perplexity \
    --model /mnt/ai/models/unsloth/DeepSeek-R1-GGUF/DeepSeek-R1-Q8_0/DeepSeek-R1.Q8_0-00001-of-00015.gguf \
    -ctk f16 -ctv f16 \
    --ctx-size 512 \
    --ubatch-size 512 \
    -f wiki.test.raw \
    --numa numactl \
    --threads 80
