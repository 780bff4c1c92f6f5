# Sourced by the scripts/screenshots*.sh: a neutral demo folder, a private X display and cleanup.
#   demo_env NAME DISPLAY [keep]
# Sets repo (this checkout), demo (/tmp/NAME, emptied unless "keep"), py (the venv's Python reached
# through demo/ember-studio, a link to the checkout, so no path of this machine shows in a picture);
# exports EMBER_HOME and EMBER_SETTINGS_FILE inside the demo folder (nothing of the user's changes)
# and DISPLAY; starts Xvfb on it, waits for it, and stops it and the demo's engine on exit.
demo_env() {
  local name=$1 display=$2 keep=${3:-}
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  repo="$(pwd)"
  demo="/tmp/$name"
  if [ "$keep" != keep ] || [ ! -d "$demo" ]; then
    rm -rf "$demo" && mkdir -p "$demo/home"
  fi
  [ -e "$demo/ember-studio" ] || ln -s "$repo" "$demo/ember-studio"
  py="$demo/ember-studio/.venv/bin/python"
  export EMBER_HOME="$demo/home" EMBER_SETTINGS_FILE="$demo/settings.ini" DISPLAY=":$display"
  Xvfb ":$display" -screen 0 1400x900x24 >/dev/null 2>&1 &
  xvfb=$!
  trap 'kill $xvfb 2>/dev/null; "$py" -m engine stop >/dev/null 2>&1 || true' EXIT
  for _ in $(seq 50); do [ -S "/tmp/.X11-unix/X$display" ] && break; sleep 0.2; done
  cd "$demo/ember-studio"
}
