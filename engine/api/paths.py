"""Where Ember Studio keeps its files.

Data (store, runs) lives under the user data dir, or under ``EMBER_HOME`` when
set, so tests and users can point a whole installation elsewhere. The socket
and token live in a private runtime dir (0700). Only stdlib and platformdirs
are imported here: the GUI uses this module to find the engine.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS); keep a margin.
_MAX_SOCKET_PATH = 100


class UnsafeRuntimeDir(RuntimeError):
    """The runtime dir is not private to this user; refusing to use it."""


@dataclass(frozen=True)
class Paths:
    home: Path
    runtime: Path

    @property
    def db(self) -> Path:
        return self.home / "ember.db"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def socket(self) -> Path:
        return self.runtime / "engine.sock"

    @property
    def token(self) -> Path:
        return self.runtime / "engine.token"

    @property
    def lock(self) -> Path:
        return self.runtime / "engine.lock"

    @property
    def engine_log(self) -> Path:
        return self.home / "engine.log"

    def run_dir(self, job_id: str) -> Path:
        return self.runs / job_id


def data_home() -> Path:
    env = os.environ.get("EMBER_HOME")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("ember-studio", appauthor=False))


def known_engines_file() -> Path:
    """The engine certificates this user accepted (engine/api/remote_engine.py): ``EMBER_KNOWN_ENGINES``, else in
    the user's config folder."""
    env = os.environ.get("EMBER_KNOWN_ENGINES")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("ember-studio", appauthor=False)) / "known_engines.json"


def saved_logins_file() -> Path:
    """Tokens the user chose to keep for remote engines (engine/api/remote_engine.py's SavedLogins)."""
    return known_engines_file().with_name("engine_logins.json")


def builtin_models_dir() -> Path:
    """Where the built-in models are written on first use: ``EMBER_MODELS_DIR``, else ``<data>/models``.

    One folder can serve several data folders (the tests share one, so SmolLM2 is converted once)."""
    env = os.environ.get("EMBER_MODELS_DIR")
    return Path(env).expanduser().resolve() if env else data_home() / "models"


def runtime_home(home: Path) -> Path:
    env = os.environ.get("EMBER_RUNTIME_DIR")
    if env:
        candidate = Path(env).expanduser().resolve()
    elif os.environ.get("EMBER_HOME"):
        candidate = home / "run"
    elif sys.platform.startswith("linux") and not os.environ.get("XDG_RUNTIME_DIR"):
        # No login session (ssh without systemd, containers): a private dir in /tmp.
        candidate = Path(tempfile.gettempdir()) / f"ember-studio-{os.getuid()}"
    else:
        import platformdirs

        candidate = Path(platformdirs.user_runtime_dir("ember-studio", appauthor=False))
    if len(str(candidate / "engine.sock")) > _MAX_SOCKET_PATH:
        # Deep data dirs cannot hold a Unix socket; use a short private dir keyed by the home.
        digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
        candidate = Path(tempfile.gettempdir()) / f"ember-{os.getuid()}-{digest}"
    return candidate


def resolve() -> Paths:
    home = data_home()
    return Paths(home=home, runtime=runtime_home(home))


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` as 0700 and check that nobody else can use it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeRuntimeDir(f"{path} is not a plain directory")
    if st.st_uid != os.getuid():
        raise UnsafeRuntimeDir(
            f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); "
            "set EMBER_RUNTIME_DIR to a directory of your own"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def read_token(paths: Paths) -> str:
    return paths.token.read_text(encoding="ascii").strip()
