"""Entry point of the frozen (PyInstaller) `ember` binary.

One binary is both the app and, for the engine's child processes, the Python interpreter: a command
line such as ``ember -m engine serve``, ``ember -u -m engine.recipes.train --run-dir D`` or
``ember -I -c CODE`` is run the way ``python`` would run it (engine/launch/frozen.py); anything else is an
``ember`` command line for the GUI or the headless CLI (app/__main__.py).
"""

from __future__ import annotations

import multiprocessing
import os
import sys


def restore_library_path() -> None:
    """Give child processes the library path the user had, not the build's.

    The bootloader puts the build's own libraries first on LD_LIBRARY_PATH (keeping the user's value in
    LD_LIBRARY_PATH_ORIG). This process has already loaded its libraries, so restoring the value only
    affects children: git, nvidia-smi, ssh or trtexec then load the system's libraries, not ours. A
    child that is this binary again gets the build's path from the bootloader as before.
    """
    if not getattr(sys, "frozen", False):
        return
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is not None:
        os.environ["LD_LIBRARY_PATH"] = original
    elif os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)[0] == getattr(sys, "_MEIPASS", None):
        del os.environ["LD_LIBRARY_PATH"]  # the user had none; the bootloader set it


def dispatch(argv: list[str]) -> int:
    """Run ``argv`` (without the program name) as the interpreter or as the app; the exit code."""
    from engine.launch.frozen import interpret

    code = interpret(argv)
    if code is not None:
        return code
    from app.__main__ import main as app_main

    return int(app_main(argv) or 0)


if __name__ == "__main__":
    multiprocessing.freeze_support()
    restore_library_path()
    sys.exit(dispatch(sys.argv[1:]))
