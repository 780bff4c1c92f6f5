#!/usr/bin/env bash
# Screenshots of the real app against a real engine and real runs, under Xvfb, into docs/images/.
# Needs: apt-get install xvfb libxcb-cursor0
# Paths shown in the pictures are neutral: the repo is reached through a link and the
# data dir is a fresh demo folder, so nothing of the machine that took them shows.
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo 97
"$py" -m engine start >/dev/null
"$py" -m engine.cli jobs start system.probe --quiet >/dev/null
"$py" scripts/screenshots.py "$repo/docs/images"
echo "screenshots in docs/images/"
