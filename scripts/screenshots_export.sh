#!/usr/bin/env bash
# Screenshots of the Export wizard under Xvfb, into docs/images/export-*.png and variants-device.png:
# a MiniLM fine-tune exported to every portable format and deployed in one click to a "Jetson" that is a real
# OpenSSH server on 127.0.0.1 with the test stand-in for trtexec (no Jetson here; see scripts/screenshots_export.py).
# Runs from a neutral demo folder so no machine path shows in the pictures.
# Needs: apt-get install xvfb libxcb-cursor0 openssh-server
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-export 96
export EMBER_SSH_KNOWN_HOSTS=""
"$py" scripts/screenshots_export.py "$demo/jetson" "$repo/docs/images"
echo "screenshots in docs/images/export-*.png and variants-device.png"
