#!/usr/bin/env bash
# Smoke tests of the one-folder build: version, the interpreter forms the engine uses, the engine's
# start/status/stop, the manual for Help, a real system.probe job and a 2-process digits fine-tune (children started by the
# frozen binary, torchrun included), an offscreen GUI start, and the desktop entry.
# Usage: packaging/smoke.sh [path/to/ember]     (default dist/ember-studio/ember)
#        SMOKE_TRAIN=0 packaging/smoke.sh        skips the fine-tune (about 20 s on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-dist/ember-studio/ember}")
if [[ ! -x $BIN ]]; then
    echo "smoke.sh: no build at $BIN; run packaging/build.sh first." >&2
    exit 1
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ember-smoke.XXXXXX")
export EMBER_HOME=$WORK/home EMBER_SETTINGS_FILE=$WORK/settings.ini XDG_RUNTIME_DIR=$WORK/run
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
cleanup() {
    timeout 60 "$BIN" engine stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
step() { echo "smoke: $*"; }
fail() {
    echo "smoke: FAILED: $*" >&2
    [[ -f $EMBER_HOME/engine.log ]] && { echo "--- engine.log (tail)" >&2; tail -40 "$EMBER_HOME/engine.log" >&2; }
    exit 1
}
t0=$(date +%s)

step "version"
out=$(timeout 60 "$BIN" --version) || fail "ember --version"
[[ $out == "ember-studio "* ]] || fail "ember --version printed '$out'"
echo "  $out"

step "interpreter forms (-c, -I -c, -u -m)"
out=$(timeout 60 "$BIN" -c 'import sys; print("c-ok", sys.argv[1:])' a b) || fail "ember -c"
[[ $out == "c-ok ['a', 'b']" ]] || fail "ember -c printed '$out'"
out=$(timeout 60 "$BIN" -I -c 'import sys; sys.exit(7)'; echo "rc=$?") || true
[[ $out == "rc=7" ]] || fail "ember -I -c exit status: '$out'"
out=$(timeout 120 "$BIN" -u -m engine --version) || fail "ember -u -m engine --version"
[[ $out == "ember-studio "* ]] || fail "ember -u -m engine --version printed '$out'"

step "the manual for Help ships in the build"
out=$(timeout 60 "$BIN" -c 'from app.text.manual import docs_dir; print(docs_dir())') || fail "app.text.manual.docs_dir()"
[[ -f $out/first-run.md && -f $out/troubleshooting.md ]] || fail "no docs in the build (docs_dir() = '$out')"

step "engine start / status"
timeout 120 "$BIN" engine start || fail "ember engine start"
timeout 60 "$BIN" engine status || fail "ember engine status"

step "system.probe job (a child process of the frozen engine)"
cat > "$WORK/probe.yaml" <<'YAML'
kind: system.probe
name: smoke probe
spec: {}
YAML
timeout 300 "$BIN" run "$WORK/probe.yaml" --quiet || fail "the system.probe job did not succeed"

if [[ ${SMOKE_TRAIN:-1} != 0 ]]; then
    step "2-step digits fine-tune, 2 processes through torchrun"
    cat > "$WORK/digits.yaml" <<'YAML'
kind: train.finetune
name: smoke digits
spec:
  task: image_classification
  method: {kind: full}
  batch_size: 16
  max_steps: 2
  eval_every: 2
  checkpoint_every: 2
  distributed: {strategy: ddp, nproc: 2}
YAML
    timeout 480 "$BIN" run "$WORK/digits.yaml" --quiet || {
        run_dir=$(ls -d "$EMBER_HOME"/runs/*/ 2>/dev/null | tail -1)
        [[ -n $run_dir && -f $run_dir/stdout.log ]] && tail -40 "$run_dir/stdout.log" >&2
        fail "the digits fine-tune did not succeed"
    }
fi

step "offscreen GUI start"
out=$(QT_QPA_PLATFORM=offscreen timeout 120 "$BIN" --page runs --measure-startup --exit-after-paint) \
    || fail "the GUI did not start"
[[ $out == *EMBER_FIRST_PAINT* ]] || fail "the GUI never painted: '$out'"
echo "  $(grep EMBER_FIRST_PAINT <<<"$out")"

step "engine stop"
timeout 60 "$BIN" engine stop || fail "ember engine stop"

step "desktop entry"
timeout 60 "$BIN" install-desktop-entry --prefix "$WORK/share" || fail "install-desktop-entry"
grep -qx "Exec=$BIN" "$WORK/share/applications/ember-studio.desktop" || fail "Exec= is not $BIN"
[[ -f $WORK/share/icons/hicolor/256x256/apps/ember-studio.png ]] || fail "no 256 px icon"
timeout 60 "$BIN" install-desktop-entry --uninstall --prefix "$WORK/share" >/dev/null || fail "--uninstall"
[[ ! -e $WORK/share/applications/ember-studio.desktop ]] || fail "--uninstall left the .desktop file"

echo "smoke: all passed in $(( $(date +%s) - t0 )) s"
