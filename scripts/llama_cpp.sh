#!/usr/bin/env bash
# llama.cpp for the GGUF export and its checks (docs/export.md#gguf): llama-cpp-python built from its
# source distribution (which carries llama.cpp itself), and llama.cpp's converter (convert_hf_to_gguf.py,
# conversion/, gguf-py/) from the same source, installed into .venv (.venv/share/llama.cpp), with the
# source needed to build llama.cpp's tools (llama.cpp-src.tar.gz, ~10 MB) for a Jetson bundle.
#
# The build takes about 3.5 minutes on 2 cores, so the wheel is kept in ~/.cache/ember-studio (or
# $EMBER_BUILD_CACHE) per version and built once per machine; later installs take seconds.
#   scripts/llama_cpp.sh          build if needed, then install into .venv
#   scripts/llama_cpp.sh build    only build (needs no .venv: CI runs it beside the app's build)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="$(sed -n 's/^llama-cpp-python==//p' constraints.txt)"
# Portable x86-64 code (AVX2, FMA, F16C), not -march=native: a native build on a Sapphire Rapids machine (AVX-512,
# AMX) dies with a general protection fault in libggml-cpu when it quantizes or runs q4_k_m, and a wheel
# built on one machine must run on the next. The build's flavour is part of the cache's name.
FLAVOUR="avx2"
CACHE="${EMBER_BUILD_CACHE:-$HOME/.cache/ember-studio}/llama-cpp-python-$VERSION-$FLAVOUR"
SDIST="$CACHE/llama_cpp_python-$VERSION.tar.gz"
PY="${PYTHON:-python3}"

build() {
  mkdir -p "$(dirname "$CACHE")"
  exec 9>"$CACHE.lock" && flock 9  # one build at a time; a second caller waits for it and then reuses it
  if ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1 && [ -f "$SDIST" ]; then
    return 0
  fi
  mkdir -p "$CACHE"
  local start=$SECONDS
  echo "== building llama.cpp (llama-cpp-python $VERSION) into $CACHE"
  [ -f "$SDIST" ] || "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE"
  # The library only: no multimodal part, examples, tools or tests. The converter runs from Python.
  local cpu=""
  if [ "$(uname -m)" = x86_64 ]; then
    cpu="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  fi
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF $cpu ${EMBER_LLAMA_CMAKE_ARGS:-}" \
    "$PY" -m pip wheel --quiet --no-deps "$SDIST" -w "$CACHE.tmp"
  mv "$CACHE.tmp"/llama_cpp_python-*.whl "$CACHE"/ && rmdir "$CACHE.tmp"
  echo "== llama.cpp built in $((SECONDS - start)) s"
}

install() {
  .venv/bin/python -m pip install --quiet --no-deps "$CACHE"/llama_cpp_python-"$VERSION"-*.whl
  local share=.venv/share/llama.cpp top="llama_cpp_python-$VERSION/vendor/llama.cpp"
  rm -rf "$share" && mkdir -p "$share"
  tar -xzf "$SDIST" -C "$share" --strip-components=3 \
    "$top/convert_hf_to_gguf.py" "$top/conversion" "$top/gguf-py" "$top/LICENSE"
  # The source a language model's Jetson bundle carries, to build llama.cpp on the device (engine/export/llm_bundle.py).
  local src
  src="$(mktemp -d)"
  tar -xzf "$SDIST" -C "$src" --strip-components=3 "$top/CMakeLists.txt" "$top/cmake" "$top/common" "$top/ggml" \
    "$top/include" "$top/src" "$top/tools" "$top/vendor" "$top/LICENSE"
  tar -czf "$share/llama.cpp-src.tar.gz" -C "$src" .
  rm -rf "$src"
  echo "$VERSION" > "$share/VERSION"
  echo "$FLAVOUR" > "$share/FLAVOUR"  # scripts/venv.sh rebuilds a venv whose llama.cpp is of another flavour
}

case "${1:-all}" in
  build) build ;;
  install) install ;;
  all) build; install ;;
  *) echo "usage: scripts/llama_cpp.sh [build|install]" >&2; exit 2 ;;
esac
