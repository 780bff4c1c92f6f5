#!/usr/bin/env bash
# A screenshot of the Data step's personal-data findings under Xvfb, into docs/images/.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-pii 97
"$py" -m engine start >/dev/null
"$py" scripts/screenshots_pii.py "$repo/docs/images" "$demo/data"
echo "screenshots in docs/images/"
