# source: ../shared/seeds/002_783cabd8cbbf7f20.txt lines 32-35
./llama-server \
-m <model.gguf> \
-ngl 999 \
-ot "blk\.([0-9]|[1-2][0-9]|30)\.=CUDA0,exps=CPU"
