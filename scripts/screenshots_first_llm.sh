#!/usr/bin/env bash
# Screenshots of the README's language-model path on a fresh data folder (scripts/screenshots_first_llm.py):
# the built-in model prepared once, an evaluation in progress, a served endpoint in the Playground, the Models
# page and a tooltip, under Xvfb, into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
# EMBER_SHOTS_ONLY=first: the wizard's first use alone; =models: the Models page alone, in the folder kept
demo_env ember-demo-first-llm 91 "$([ "${EMBER_SHOTS_ONLY:-}" = models ] && echo keep)"
export EMBER_MODELS_DIR="$demo/models"  # no built-in model written yet, as on a new machine
export HF_HOME="$demo/hf"  # the Models page names the Hugging Face cache: a neutral folder
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_first_llm.py "$repo/docs/images"
echo "screenshots in docs/images/"
