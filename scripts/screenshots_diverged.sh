#!/usr/bin/env bash
# A screenshot of the Monitor on a real run that diverged, under Xvfb, into docs/images/.
# Runs from a neutral demo folder so no machine path shows in the picture.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-diverged 95
"$py" scripts/screenshots_diverged.py "$repo/docs/images"
echo "screenshots in docs/images/"
