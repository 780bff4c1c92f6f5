#!/usr/bin/env bash
# Screenshots of a first user's screens (the manual, About, the Data step's columns, a narrow Training
# step, variants named by their parent) under Xvfb, into docs/images/. Needs: apt-get install xvfb
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-first-use 92
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_first_use.py "$repo/docs/images"
echo "screenshots in docs/images/"
