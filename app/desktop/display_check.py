"""Before Qt starts: pick the display platform and make sure its Qt plugin can load.

PySide6's X11 plugin (``libqxcb.so``) links against system libraries that a stock Debian or Ubuntu
desktop often lacks (``libxcb-cursor0``, ``libxcb-icccm4``, ``libxcb-keysyms1``, ...). Qt then
aborts naming only the first of them, so installing that one brings the same message back. This
module runs ``ldd`` on the plugin once, maps every ``not found`` library to its Debian/Ubuntu
package, installs them all when it may (as root, or with sudo that needs no password), and
otherwise prints the one ``apt-get install`` line that fixes it.

It imports no Qt module: it must run before anything loads a platform plugin, and it only
locates PySide6's files. Nothing is cached, so a library installed or removed since the last
start is always seen; when nothing is missing it costs one ``ldd`` call.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

# The plugin file of each platform this module checks, and how messages call it.
PLUGIN_FILES = {"xcb": "libqxcb.so", "wayland": "libqwayland.so"}
PLUGIN_NAMES = {"xcb": "X11 display plugin (xcb)", "wayland": "Wayland display plugin"}

# Library (soname) -> the Debian/Ubuntu package that ships it. These are what PySide6's xcb and
# Wayland plugins and the Qt libraries under them link against (read with ldd on the plugins).
PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb-present.so.0": "libxcb-present0",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libXau.so.6": "libxau6",
    "libXdmcp.so.6": "libxdmcp6",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libGLX.so.0": "libglx0",
    "libGLdispatch.so.0": "libglvnd0",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libpcre2-8.so.0": "libpcre2-8-0",
    "libz.so.1": "zlib1g",
    "libzstd.so.1": "libzstd1",
    "libpng16.so.16": "libpng16-16",
    "libexpat.so.1": "libexpat1",
    "libbrotlidec.so.1": "libbrotli1",
    "libbrotlicommon.so.1": "libbrotli1",
    "libwayland-client.so.0": "libwayland-client0",
    "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")

Runner = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class Choice:
    """Where the window will open. ``platform``: the value to put in QT_QPA_PLATFORM (None: leave
    Qt's own choice); ``check``: the plugin whose libraries to check (None: nothing to check);
    ``fallback``: a plugin to use instead when ``check``'s libraries are missing; ``problem``: why
    no window can open at all."""

    platform: str | None = None
    check: str | None = None
    fallback: str | None = None
    problem: str | None = None


def requested_platform(env: Mapping[str, str], qt_args: Sequence[str]) -> str | None:
    """The platform the user asked for: Qt's ``-platform NAME`` argument, else QT_QPA_PLATFORM."""
    args = list(qt_args)
    for i, arg in enumerate(args):
        if arg in ("-platform", "--platform") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(("-platform=", "--platform=")):
            return arg.split("=", 1)[1]
    return env.get("QT_QPA_PLATFORM") or None


def choose_platform(env: Mapping[str, str], qt_args: Sequence[str], available: set[str]) -> Choice:
    """Decide where the window opens, from the environment and the plugins PySide6 ships."""
    requested = requested_platform(env, qt_args)
    if requested:
        # Honour the user's choice ("offscreen", "wayland;xcb", "xcb:option=..."): check only the
        # first platform named, and only if it is one whose libraries this module knows.
        first = requested.split(";")[0].split(":")[0].strip()
        return Choice(check=first if first in PLUGIN_FILES and first in available else None)
    wayland, x11 = env.get("WAYLAND_DISPLAY"), env.get("DISPLAY")
    if wayland and "wayland" in available:
        # A Wayland session: Qt's native Wayland plugin, or X11 through XWayland when only that can load.
        return Choice(platform="wayland", check="wayland", fallback="xcb" if x11 and "xcb" in available else None)
    if x11:
        return Choice(check="xcb" if "xcb" in available else None)
    if wayland:
        return Choice(problem=(
            "ember: cannot open the window: this is a Wayland session (WAYLAND_DISPLAY is set), but "
            "PySide6 has no Wayland plugin and DISPLAY is not set, so X11 (XWayland) cannot be used "
            "either.\nStart Ember from a session with DISPLAY set, or reinstall PySide6."))
    return Choice(problem=(
        "ember: cannot open the window: there is no display (neither DISPLAY nor WAYLAND_DISPLAY "
        "is set).\nStart Ember from a desktop session, or over SSH with X forwarding (ssh -X). "
        "Without a display, use the headless commands (ember jobs --help), or set "
        "QT_QPA_PLATFORM=offscreen for scripted use."))


def platforms_dir() -> Path | None:
    """PySide6's ``Qt/plugins/platforms`` folder, found without importing PySide6; None if absent."""
    if getattr(sys, "frozen", False):
        # A PyInstaller build keeps PySide6's Qt folder layout inside the bundle.
        base = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)) / "PySide6"
    else:
        try:
            spec = importlib.util.find_spec("PySide6")
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        base = Path(list(spec.submodule_search_locations)[0])
    folder = base / "Qt" / "plugins" / "platforms"
    return folder if folder.is_dir() else None


def missing_libraries(ldd_output: str) -> list[str]:
    """The libraries ``ldd`` reports as ``not found``, each once, in the order it names them."""
    found: list[str] = []
    for line in ldd_output.splitlines():
        match = _NOT_FOUND.match(line)
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


def packages_for(sonames: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the Debian/Ubuntu packages that provide ``sonames``, each once; the sonames with no known package)."""
    packages: list[str] = []
    unknown: list[str] = []
    for soname in sonames:
        package = PACKAGES.get(soname)
        if package is None:
            unknown.append(soname)
        elif package not in packages:
            packages.append(package)
    return packages, unknown


def install_line(packages: Sequence[str], root: bool = False) -> str:
    """The one command that installs ``packages``."""
    return ("" if root else "sudo ") + "apt-get install -y " + " ".join(packages)


def is_root() -> bool:
    return getattr(os, "geteuid", lambda: -1)() == 0  # Windows has no uid: never root


which = shutil.which  # module-level so tests can replace it


def run_ldd(plugin: Path, run: Runner) -> str | None:
    """ldd's output for ``plugin``; None when ldd is not there or cannot read the file."""
    if which("ldd") is None:
        return None
    env = dict(os.environ)
    if getattr(sys, "frozen", False) and hasattr(sys, "_MEIPASS"):
        # The bundle's own libraries are found through the path the bootloader set for this
        # process (ember_entry.py restores the user's for children), so give ldd the same.
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (sys._MEIPASS, env.get("LD_LIBRARY_PATH")) if p)
    try:
        done = run(["ldd", str(plugin)], capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def ldd_not_found_lines(ldd_output: str, sonames: Sequence[str]) -> dict[str, str]:
    """For each soname, ldd's own line about it (quoted in messages about unknown libraries)."""
    lines: dict[str, str] = {}
    for line in ldd_output.splitlines():
        match = _NOT_FOUND.match(line)
        if match and match.group(1) in sonames:
            lines.setdefault(match.group(1), line.strip())
    return lines


def installer(run: Runner) -> list[str] | None:
    """How to run apt-get here: [] as root, ["sudo", "-n"] with password-less sudo, None if neither."""
    if which("apt-get") is None:
        return None
    if is_root():
        return []
    if which("sudo") is None:
        return None
    try:
        done = run(["sudo", "-n", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return ["sudo", "-n"] if done.returncode == 0 else None


def apt_install(prefix: list[str], packages: Sequence[str], run: Runner) -> str | None:
    """Refresh the package lists (a fresh container has none) and install ``packages``.

    None when apt-get succeeded, else the end of its output (shown only then: dpkg is verbose).
    """
    commands = [[*prefix, "apt-get", "update", "-qq"],
                [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
                 "--no-install-recommends", *packages]]
    for cmd in commands:
        try:
            done = run(cmd, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{' '.join(cmd)}: {exc}"
        if done.returncode != 0:
            lines = f"{done.stdout or ''}{done.stderr or ''}".strip().splitlines()
            return "\n".join([f"{' '.join(cmd)} failed (exit status {done.returncode}):", *lines[-8:]])
    return None


def _say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)  # noqa: T201 - Qt has not started: the terminal is the only place to say it


def _missing(platforms: Path, plugin: str, run: Runner) -> tuple[list[str], str]:
    output = run_ldd(platforms / PLUGIN_FILES[plugin], run)
    return (missing_libraries(output), output) if output else ([], "")


def ensure_display(qt_args: Sequence[str] = (), env: MutableMapping[str, str] | None = None, *,
                   run: Runner = subprocess.run, out: TextIO | None = None) -> int | None:
    """Make the display plugin loadable before Qt starts: None to go on, or the exit code to stop with.

    May set QT_QPA_PLATFORM in ``env`` (os.environ by default) to the platform chosen.
    """
    env = os.environ if env is None else env
    out = sys.stderr if out is None else out
    if not sys.platform.startswith("linux") or env.get("EMBER_SKIP_DISPLAY_CHECK"):
        return None
    platforms = platforms_dir()
    if platforms is None:
        return None  # no PySide6 files to check: Qt reports that itself
    available = {name for name, file in PLUGIN_FILES.items() if (platforms / file).is_file()}
    choice = choose_platform(env, qt_args, available)
    if choice.problem:
        _say(out, choice.problem)
        return 1
    if choice.check is None:
        return None
    missing, output = _missing(platforms, choice.check, run)
    if missing and choice.fallback and not _missing(platforms, choice.fallback, run)[0]:
        env["QT_QPA_PLATFORM"] = choice.fallback
        return None
    if choice.platform:
        env["QT_QPA_PLATFORM"] = choice.platform
    if not missing:
        return None
    return _fix(platforms, choice.check, missing, output, run, out)


def _fix(platforms: Path, plugin: str, missing: list[str], output: str, run: Runner, out: TextIO) -> int | None:
    """Install the packages behind ``missing`` when allowed, else say exactly how; None once fixed."""
    what = PLUGIN_NAMES[plugin]
    packages, unknown = packages_for(missing)
    _say(out, f"ember: Qt's {what} needs libraries that are not installed: {', '.join(missing)}.")
    prefix = installer(run) if packages else None
    if prefix is not None:
        how = "as root" if not prefix else "with sudo"
        _say(out, f"ember: installing {' '.join(packages)} ({how}) so the window can open...")
        failure = apt_install(prefix, packages, run)
        if failure:
            _say(out, f"ember: {failure}")
        missing, output = _missing(platforms, plugin, run)
        if not missing:
            _say(out, "ember: installed; opening the window.")
            return None
        _say(out, f"ember: still missing after apt-get: {', '.join(missing)}.")
        packages, unknown = packages_for(missing)
    if packages and which("apt-get") is None:
        _say(out, "ember: install the packages that provide them with your system's package manager "
                  f"(on Debian/Ubuntu: {' '.join(packages)}), then start Ember again.")
    elif packages:
        _say(out, "ember: the window cannot open until they are installed. Run this, then start Ember again:")
        _say(out, f"  {install_line(packages, root=is_root())}")
    for soname, line in ldd_not_found_lines(output, unknown).items():
        _say(out, f"ember: no known Debian/Ubuntu package provides {soname} (ldd: '{line}'); "
                  f"find it with: apt-file search {soname}")
    return 1
