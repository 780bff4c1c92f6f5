#!/usr/bin/env bash
# Screenshots of the Hub download and a DPO run under Xvfb, into docs/images/ (scripts/screenshots_llm.py).
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-llm 96
"$py" scripts/screenshots_llm.py "$repo/docs/images"
echo "screenshots in docs/images/"
