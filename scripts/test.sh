#!/usr/bin/env bash
# Set up the development environment on first use, then run every check:
# lint, the import-layer contracts and the whole test suite (GUI tests offscreen).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/engine -k replay
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
ensure_venv dev
# The remote-host and Slurm tests run a real sshd and a real Slurm on 127.0.0.1: Debian's packages.
bash scripts/system_packages.sh || true
export QT_QPA_PLATFORM=offscreen
# The workers share the cores: each job's thread pools (PyTorch, ONNX Runtime, llama.cpp) get its share,
# not one thread per core; pools larger than the cores they get wait on each other (engine/threads.py).
workers="${EMBER_TEST_WORKERS:-2}"
[ "$workers" -gt 0 ] || workers=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / workers > 0 ? $(nproc) / workers : 1 ))}"
echo "== ruff"
.venv/bin/ruff check engine app tests benchmarks
echo "== import contracts"
.venv/bin/lint-imports
echo "== pytest"
# Two workers, one file each at a time (module fixtures are set up once); the long files go first
# (tests/conftest.py). Most tests wait on real job processes, so two workers keep both cores busy.
# Pass -n 0 to run in one process, e.g. scripts/test.sh -n 0 tests/engine/test_jobs.py
# --no-loadscope-reorder: xdist would otherwise hand out the files with the most tests first, which puts the
# longest files (one or two tests of minutes each) at the end, one worker busy while the other waits.
exec .venv/bin/python -m pytest -n "${EMBER_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
