#!/usr/bin/env bash
# Screenshots of the Queue panel, the lineage report, Settings' audit log and the custom-code
# confirmation under Xvfb, into docs/images/: a real engine running real jobs.
# Runs from a neutral demo folder so no machine path shows in the picture.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-reliability 96
"$py" scripts/screenshots_reliability.py "$repo/docs/images" "$demo/my-models"
echo "screenshots in docs/images/"
