# source: https://github.com/ggml-org/ci/blob/7ab21bb66f4fab0819824648d7ed00314747fd66/llama.cpp/3b/4f2e33e2cbfca621e623c4b92b88da57a8c2f4/ggml-2-x86-cpu/README.md (tests/truth/records/misc-bert-ci-bge-small-cpu-b4248.yaml)
./bin/llama-embedding --model ../models-mnt/bge-small/ggml-model-f16.gguf -p 'I believe the meaning of life is' -ngl 99 -c 0
