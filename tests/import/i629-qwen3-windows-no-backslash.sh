# source: https://github.com/ikawrakow/ik_llama.cpp/issues/629 (tests/truth/records/ghx-ik-qwen3moe-i629-sousekd-5090-4090-win-ub2048.yaml)
.\bin\llama-sweep-bench.exe 
    --alias ubergarm/Qwen3-235B-A22B-mix-IQ3_K 
    --model C:\Users\Administrator\.lmstudio\models\ubergarm\Qwen3-235B-A22B-GGUF\Qwen3-235B-A22B-mix-IQ3_K-00001-of-00003.gguf 
    --no-mmap -rtr -fa -fmoe  
    -c 32768 -amb 512 -b 4096 -ub 2048 
    -ngl 999  -ot "blk\.([0-9]|1[0-9])\.ffn_.*=CUDA0" -ot "blk\.(2[0-9]|3[0-3])\.ffn_.*=CUDA1" -ot "blk\.[0-9]+\.ffn.*=CPU" 
    --parallel 1 --threads 32 
    --main-gpu 0 
    --warmup-batch
