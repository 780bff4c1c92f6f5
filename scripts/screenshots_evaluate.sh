#!/usr/bin/env bash
# A screenshot of Compare's Evaluations tab under Xvfb, into docs/images/: SmolLM2, its LoRA fine-tune on the
# built-in short answers and the merged variant, scored side by side. It trains and evaluates first (several
# minutes on a CPU); KEEP=keep reuses the runs of an earlier call. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-evaluate 89 "${KEEP:-}"
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_evaluate.py "$repo/docs/images"
echo "screenshots in docs/images/"
