#!/usr/bin/env bash
# Set up the development environment on first use, then run every check:
# lint, the import-layer contracts and the whole test suite (GUI tests offscreen).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/engine -k replay
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
ensure_venv dev
export QT_QPA_PLATFORM=offscreen
echo "== ruff"
.venv/bin/ruff check engine app tests benchmarks
echo "== import contracts"
.venv/bin/lint-imports
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
