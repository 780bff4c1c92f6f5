#!/usr/bin/env bash
# Build the one-folder Linux app into dist/ember-studio/ (the binary is dist/ember-studio/ember).
# Uses the project's .venv (made on first use by scripts/venv.sh with the dev extra, which brings PyInstaller).
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's .venv with the versions in constraints.txt (made on first use); PyInstaller comes with the
# dev extra (CI) or the packaging extra.
. scripts/venv.sh
ensure_venv dev
PY=.venv/bin/python
start=$(date +%s)
$PY -m PyInstaller --noconfirm --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/ember-studio.spec
# Desktop launchers look for the .desktop beside the binary, not under _internal/.
cp packaging/ember-studio.desktop dist/ember-studio/
end=$(date +%s)
echo "build.sh: built dist/ember-studio in $((end - start)) s, $(du -sh dist/ember-studio | cut -f1)"
