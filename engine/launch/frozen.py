"""Let a frozen (PyInstaller) `ember` binary stand in for the Python interpreter.

The engine starts its children as ``[sys.executable, "-m", module, ...]`` (the engine server, jobs,
torchrun, memory probes, export reloads) or ``[sys.executable, "-I", "-c", code, ...]``, and torchrun
starts each worker as ``[sys.executable, "-u", "-m", module, ...]``. In a frozen build
``sys.executable`` is the ``ember`` binary itself, and there is no separate interpreter to run.
Rather than patch every launch, the binary understands those interpreter command lines:
``interpret(argv)`` runs them and returns the exit code, or returns None when ``argv`` is an
ordinary ``ember`` command line for the app. This module imports nothing heavy and never Qt.
"""

from __future__ import annotations

import os
import runpy
import sys

# Single-letter interpreter options that take no value and may be grouped (``-uB``, ``-Iu``).
# They only adjust the interpreter; where a frozen build can honour one, apply_flag() does.
NO_VALUE_FLAGS = frozenset("bBdEiIOPqsSuvx")
# Options followed by a value (``-W ignore``, ``-X utf8``); the value is accepted and ignored.
VALUE_FLAGS = frozenset("WX")


class UsageError(Exception):
    """An interpreter-style command line this binary cannot run."""


def parse(argv: list[str]) -> tuple[str, str, list[str], set[str]] | None:
    """Split ``argv`` (without the program name) into (mode, target, rest, flags).

    mode is "module" (``-m``), "code" (``-c``) or "script" (a ``.py`` file). None: not an interpreter
    command line (no leading ``-m``/``-c``/interpreter flag), so the app handles it.
    """
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-m", "-c"):
            if i + 1 >= len(argv):
                raise UsageError(f"Argument expected for the {arg} option.")
            return ("module" if arg == "-m" else "code"), argv[i + 1], argv[i + 2:], flags
        if arg.startswith("-m") and len(arg) > 2:  # -mpkg.module
            return "module", arg[2:], argv[i + 1:], flags
        if arg.startswith("-c") and len(arg) > 2:
            return "code", arg[2:], argv[i + 1:], flags
        letters = arg[1:]
        if arg.startswith("-") and not arg.startswith("--") and letters:
            if letters[0] in VALUE_FLAGS:
                i += 1 if len(letters) > 1 else 2
                flags.add(letters[0])
                continue
            if set(letters) <= NO_VALUE_FLAGS:
                flags.update(letters)
                i += 1
                continue
        if arg.endswith(".py") and (flags or os.path.isfile(arg)):
            return "script", arg, argv[i + 1:], flags
        if flags:
            raise UsageError(f"The ember binary cannot run {arg!r} as the Python interpreter would; "
                             "use -m MODULE, -c CODE or a .py file.")
        return None
    if flags:
        raise UsageError("The ember binary has no interactive Python prompt; use -m MODULE or -c CODE.")
    return None


def apply_flags(flags: set[str]) -> None:
    """Honour the flags that matter at run time: -u (unbuffered output, which torchrun relies on
    for live worker logs) and -B (no .pyc files). -I/-E/-s keep the environment out; a frozen
    binary never reads PYTHONPATH or user site-packages anyway."""
    if "u" in flags:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and hasattr(stream, "reconfigure"):
                stream.reconfigure(write_through=True)
    if "B" in flags:
        sys.dont_write_bytecode = True


def interpret(argv: list[str]) -> int | None:
    """Run ``argv`` as ``python argv...`` would; None when it is an app command line instead."""
    try:
        parsed = parse(argv)
    except UsageError as exc:
        print(f"ember: {exc}", file=sys.stderr)  # noqa: T201 - the interpreter's own usage error
        return 2
    if parsed is None:
        return None
    mode, target, rest, flags = parsed
    apply_flags(flags)
    isolated = "I" in flags or "P" in flags
    try:
        if mode == "module":
            sys.argv = [target, *rest]  # runpy replaces argv[0] with the module's file
            if not isolated:
                sys.path.insert(0, os.getcwd())  # as `python -m` does
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif mode == "code":
            sys.argv = ["-c", *rest]
            if not isolated:
                sys.path.insert(0, "")
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = [target, *rest]
            if not isolated:
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def _exit_code(code: object) -> int:
    """SystemExit's code as the interpreter turns it into a process status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # noqa: T201 - `sys.exit("message")` prints the message
    return 1
