#!/usr/bin/env bash
# Screenshots of a team engine (users, Connect to engine) under Xvfb, into docs/images/.
# Needs: apt-get install xvfb libxcb-cursor0
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-team 98
export EMBER_KNOWN_ENGINES="$demo/known_engines.json"
"$py" -m engine serve --listen 127.0.0.1:7443 > "$demo/engine.out" 2>&1 &
for _ in $(seq 100); do "$py" -m engine status >/dev/null 2>&1 && break; sleep 0.2; done
"$py" scripts/screenshots_team.py "$repo/docs/images"
echo "screenshots in docs/images/"
