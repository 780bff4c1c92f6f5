#!/usr/bin/env bash
# A screenshot of the Monitor's generated answers under Xvfb, into docs/images/.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-answers 95 "${1:-}"   # "keep": reuse the last demo folder and its finished run
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_answers.py "$repo/docs/images"
echo "screenshots in docs/images/"
