#!/usr/bin/env bash
# Screenshots of the Playground under Xvfb, into docs/images/: a LoRA fine-tune of SmolLM2 beside SmolLM2 itself,
# and a text classifier beside its dynamic int8 variant. It trains both first (several minutes on a CPU);
# KEEP=keep reuses the runs of an earlier call. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-playground 91 "${KEEP:-}"
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_playground.py "$repo/docs/images"
echo "screenshots in docs/images/"
