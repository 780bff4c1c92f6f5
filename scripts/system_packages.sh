#!/usr/bin/env bash
# Debian packages the tests run for real, installed when missing (scripts/test.sh; .ci/run starts it
# beside the app's build): OpenSSH's server and client for the remote-host tests (tests/sshd.py), and
# Slurm with munge for the cluster tests (tests/slurm.py starts its own slurmctld and slurmd).
set -uo pipefail
need=()
{ [ -x /usr/sbin/sshd ] && command -v ssh-keygen >/dev/null 2>&1; } || need+=(openssh-server openssh-client)
for tool in slurmctld slurmd munged; do
  [ -x "/usr/sbin/$tool" ] || { need+=(slurmctld slurmd slurm-client munge); break; }
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "== installing ${need[*]} (for the remote-host and Slurm tests)"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
# The tests start their own daemons, on their own ports and sockets, whatever the install started.
{ $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends "${need[@]}" >/dev/null; } \
  || { echo "warning: could not install ${need[*]}; the tests in tests/remote will fail until they are installed" >&2
       exit 1; }
