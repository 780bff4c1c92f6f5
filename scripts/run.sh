#!/usr/bin/env bash
# Set up Ember Studio on first use, then open it. Extra arguments go to `ember`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv.sh
ensure_venv
exec .venv/bin/ember "$@"
