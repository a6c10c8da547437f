# source: https://github.com/ikawrakow/ik_llama.cpp/pull/344 (tests/truth/records/ghx-ik-glm4-pr344-ubergarm-3090ti-32k.yaml)
CUDA_VISIBLE_DEVICE=0 \
./build/bin/llama-sweep-bench \
    --model /mnt/astrodata/llm/models/bartowski/THUDM_GLM-Z1-32B-0414-GGUF/THUDM_GLM-Z1-32B-0414-IQ4_XS.gguf \
    -fa -ctk f16 -ctv f16 \
    -c 32768 \
    -ngl 99 \
    --threads 16
