"""`ember install-desktop-entry [--uninstall] [--prefix DIR]`: put Ember Studio in the desktop's menu.

pip and pipx install a launcher script but nothing a desktop menu can see. This writes the two files
the freedesktop.org specs ask for, under DIR (default ~/.local/share, the per-user data directory):

    applications/ember-studio.desktop                 Exec= the absolute path of this `ember`
    icons/hicolor/<N>x<N>/apps/ember-studio.png       N = 48, 128, 256 (rendered from ember.svg)

The absolute Exec path matters: desktop launchers do not read the shell's PATH, where pipx's
~/.local/bin may be missing. Imports nothing from Qt, so it works without a display.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

APP_ID = "ember-studio"
ICON_SIZES = (48, 128, 256)
ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"


def default_prefix() -> Path:
    """$XDG_DATA_HOME, or ~/.local/share when it is unset."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def launcher_command() -> str:
    """The command line that starts this installation's `ember`, with absolute paths."""
    if getattr(sys, "frozen", False):  # the PyInstaller build: the binary itself
        return _quote(os.path.abspath(sys.executable))
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name == "ember" and Path(argv0).is_file():
        return _quote(os.path.abspath(argv0))
    found = shutil.which("ember")
    if found:
        return _quote(os.path.abspath(found))
    # `python -m app install-desktop-entry` from a checkout with no `ember` script.
    return f"{_quote(os.path.abspath(sys.executable))} -m app"


def _quote(path: str) -> str:
    """Exec= quoting (Desktop Entry spec): double quotes around an argument with reserved characters."""
    if all(c.isalnum() or c in "/._-+" for c in path):
        return path
    escaped = "".join("\\" + c if c in '"`$\\' else c for c in path)
    return f'"{escaped}"'


def entry_text(command: str) -> str:
    """The .desktop file's text for launching ``command``."""
    first = shlex.split(command)[0]
    return (
        "[Desktop Entry]\n"
        "Type=Application\n"
        "Name=Ember Studio\n"
        "GenericName=Model fine-tuning studio\n"
        "Comment=Fine-tune, compress and deploy PyTorch models\n"
        f"TryExec={_quote(first)}\n"
        f"Exec={command}\n"
        f"Icon={APP_ID}\n"
        "Terminal=false\n"
        "Categories=Development;Science;\n"
        "Keywords=PyTorch;fine-tune;LoRA;ONNX;quantization;\n"
        "StartupWMClass=ember\n"
    )


def paths(prefix: Path) -> list[Path]:
    """Every file install() writes under ``prefix``: the .desktop file first, then the icons."""
    return [prefix / "applications" / f"{APP_ID}.desktop",
            *(prefix / "icons" / "hicolor" / f"{n}x{n}" / "apps" / f"{APP_ID}.png" for n in ICON_SIZES)]


def install(prefix: Path, command: str | None = None) -> list[Path]:
    """Write the .desktop file and the icons; the paths written."""
    desktop, *icons = paths(prefix)
    desktop.parent.mkdir(parents=True, exist_ok=True)
    tmp = desktop.with_suffix(".tmp")
    tmp.write_text(entry_text(command or launcher_command()), encoding="utf-8")
    tmp.replace(desktop)
    for size, dest in zip(ICON_SIZES, icons, strict=True):
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ICONS / f"ember-{size}.png", dest)
    _refresh(prefix)
    return [desktop, *icons]


def uninstall(prefix: Path) -> list[Path]:
    """Remove what install() wrote; the paths removed (missing ones are skipped)."""
    removed = []
    for path in paths(prefix):
        if path.is_file():
            path.unlink()
            removed.append(path)
    _refresh(prefix)
    return removed


def _refresh(prefix: Path) -> None:
    """Tell the desktop about the change, where the tool for it is installed (it often is not)."""
    tool = shutil.which("update-desktop-database")
    apps = prefix / "applications"
    if tool and apps.is_dir():
        subprocess.run([tool, str(apps)], capture_output=True, check=False, timeout=60)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="ember install-desktop-entry",
        description="Add Ember Studio (menu entry and icon) to the desktop, for this user.")
    ap.add_argument("--uninstall", action="store_true", help="remove the entry and icons instead")
    ap.add_argument("--prefix", type=Path, default=None, metavar="DIR",
                    help="data directory to write under (default: $XDG_DATA_HOME or ~/.local/share)")
    args = ap.parse_args(argv)
    prefix = (args.prefix or default_prefix()).expanduser().absolute()
    try:
        if args.uninstall:
            removed = uninstall(prefix)
            for path in removed:
                print(f"removed {path}")
            if not removed:
                print(f"nothing to remove: no Ember Studio desktop entry under {prefix}")
            return 0
        command = launcher_command()
        for path in install(prefix, command):
            print(f"wrote {path}")
    except OSError as exc:
        print(f"ember: could not write the desktop entry under {prefix}: {exc}. "
              "Choose a writable directory with --prefix.", file=sys.stderr)
        return 1
    print(f"Ember Studio is in the desktop menu (Exec={command}); it may take a moment to show up.")
    return 0
