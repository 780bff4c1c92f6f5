#!/usr/bin/env bash
# Screenshots of the first-run experience (Welcome, tour, both themes, notifications) under Xvfb,
# into docs/images/. Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-first-run 93
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_first_run.py "$repo/docs/images"
echo "screenshots in docs/images/"
