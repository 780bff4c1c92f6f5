#!/usr/bin/env bash
# CI step: build the one-folder app, then run its smoke tests (packaging/smoke.sh). Prints the time of each.
# build.sh sets up the project's .venv itself (the dev extra brings PyInstaller). CI runs build.sh, then the suite runs
# the smoke through tests/test_packaging.py; this script is the same two steps by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash packaging/build.sh
t1=$(date +%s)
bash packaging/smoke.sh dist/ember-studio/ember
t2=$(date +%s)
echo "ci.sh: build $((t1 - t0)) s, smoke $((t2 - t1)) s, total $((t2 - t0)) s"
