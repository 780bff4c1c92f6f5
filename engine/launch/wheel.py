"""Ember's own wheel, written straight from the installed packages, for Prepare to copy to a host.

A pure-Python wheel is a zip with the package files and a small .dist-info
(PEP 427). Writing it here needs no setuptools, no network and no source tree,
so it works the same from a checkout and from an installed copy. Dependencies
are left out on purpose: the host installs it with --no-deps and keeps its own
torch (a CUDA or Jetson build this machine cannot choose for it).
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

import engine

PACKAGES = ("engine", "app")
# app/resources/docs is the manual the GUI shows (a few MB of screenshots): a host never needs it.
SKIP_DIRS = {"__pycache__", "docs"}
SKIP_SUFFIXES = (".pyc", ".pyo")
ENTRY_POINTS = "[console_scripts]\nember = app.__main__:main\nember-engine = engine.cli.main:main\n"


def _files(root: Path) -> list[tuple[str, Path]]:
    found = []
    for package in PACKAGES:
        base = root / package
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if not name.endswith(SKIP_SUFFIXES):
                    path = Path(dirpath) / name
                    found.append((path.relative_to(root).as_posix(), path))
    return found


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(out_dir: Path) -> Path:
    version = engine.__version__
    root = Path(engine.__file__).resolve().parent.parent
    info = f"ember_studio-{version}.dist-info"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"ember_studio-{version}-py3-none-any.whl"
    tmp = target.with_suffix(".tmp")
    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: ember-studio\nVersion: {version}\n"
                            "Summary: Ember Studio engine and app (installed on a host by Prepare)\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ember-studio\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": ENTRY_POINTS,
    }
    record = []
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as whl:
        for name, path in _files(root):
            data = path.read_bytes()
            whl.writestr(name, data)
            record.append(_record_line(name, data))
        for name, text in meta.items():
            whl.writestr(name, text)
            record.append(_record_line(name, text.encode()))
        record.append(f"{info}/RECORD,,")
        whl.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    os.replace(tmp, target)
    return target
