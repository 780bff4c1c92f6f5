#!/usr/bin/env bash
# Screenshot of the Hosts page under Xvfb, into docs/images/hosts.png: a real OpenSSH server on
# 127.0.0.1 (tests/sshd.py) added as a host, its key trusted and the host probed over SSH.
# Runs from a neutral demo folder so no machine path shows in the picture.
# Needs: apt-get install xvfb libxcb-cursor0 openssh-server
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-hosts 97
"$py" scripts/screenshots_hosts.py "$demo/sshd" "$repo/docs/images"
echo "screenshot in docs/images/hosts.png"
