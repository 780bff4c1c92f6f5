"""Safe extraction of a dataset given as a .zip, .tar, .tar.gz, .tgz, .tar.bz2 or .tar.xz archive.

An archive is someone else's file: a member may be named ``/etc/x`` or
``../../.bashrc`` (zip slip), be a symlink or hardlink pointing outside the
target, be a device node or FIFO, or inflate to far more than it weighs (a zip
bomb). ``extract`` refuses all of these before writing anything outside the
target: members are checked one by one, only plain files and folders are
written (links and special files are refused), and the bytes written are
counted against a limit as they are written, not taken from the headers.

``dataset_path`` is what the task loaders call: an archive path becomes the
folder (or the single CSV/JSONL file) it unpacks to, extracted once into
``<EMBER_HOME>/datasets/<name>-<key>/`` (key: the archive's path, size and
mtime), so every rank and every later look reuses it.
Stdlib only.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from engine.training.context import JobFailed

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
MAX_TOTAL_BYTES = 20 * 1024**3  # more than any dataset Ember trains on from one archive
MAX_MEMBERS = 1_000_000
CHUNK = 1 << 20
HINT = "Re-create the archive from the dataset folder itself (for example: zip -r data.zip data/)."


class UnsafeArchive(JobFailed):
    """An archive that would write outside its folder, holds links or devices, or is too big."""

    def __init__(self, message: str, hint: str = HINT):
        super().__init__(message, hint)


def is_archive(path: str | Path) -> bool:
    return str(path).lower().endswith(ARCHIVE_SUFFIXES)


def _member_path(name: str, archive: Path) -> PurePosixPath:
    """The member's relative path, or UnsafeArchive for absolute paths, '..', drive letters and NULs."""
    clean = name.replace("\\", "/")
    if "\x00" in clean:
        raise UnsafeArchive(f"{archive.name}: member {name!r} has a NUL byte in its name")
    p = PurePosixPath(clean)
    if clean.startswith("/") or (len(clean) > 1 and clean[1] == ":"):
        raise UnsafeArchive(f"{archive.name}: member {name!r} has an absolute path")
    if ".." in p.parts:
        raise UnsafeArchive(f"{archive.name}: member {name!r} points outside the archive's folder ('..')")
    parts = [part for part in p.parts if part not in ("", ".")]
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


class _Budget:
    def __init__(self, archive: Path, max_bytes: int):
        self.archive, self.max_bytes, self.used = archive, max_bytes, 0

    def add(self, n: int) -> None:
        self.used += n
        if self.used > self.max_bytes:
            raise UnsafeArchive(f"{self.archive.name} unpacks to more than {self.max_bytes:,} bytes",
                                "Use a smaller archive, or point data.path at the unpacked folder.")


def _target(dest: Path, rel: PurePosixPath, archive: Path, name: str) -> Path:
    out = (dest / rel).resolve()
    root = dest.resolve()
    if out != root and root not in out.parents:  # a folder symlinked earlier cannot exist, but check anyway
        raise UnsafeArchive(f"{archive.name}: member {name!r} would be written outside the target folder")
    return out


def _copy(src, out: Path, budget: _Budget) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    # O_EXCL|O_NOFOLLOW: never write through a link, never overwrite a member written before.
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            budget.add(len(chunk))
            f.write(chunk)


def _extract_zip(archive: Path, dest: Path, budget: _Budget) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise UnsafeArchive(f"{archive.name} has more than {MAX_MEMBERS:,} members")
        for info in infos:
            rel = _member_path(info.filename, archive)
            kind = stat.S_IFMT(info.external_attr >> 16)  # Unix file type bits; 0 when the zip has none
            if kind == stat.S_IFLNK:
                raise UnsafeArchive(f"{archive.name}: member {info.filename!r} is a symbolic link; links are refused")
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise UnsafeArchive(f"{archive.name}: member {info.filename!r} is not a plain file or folder")
            out = _target(dest, rel, archive, info.filename)
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            with zf.open(info) as src:
                _copy(src, out, budget)


def _extract_tar(archive: Path, dest: Path, budget: _Budget) -> None:
    with tarfile.open(archive, "r:*") as tf:
        count = 0
        for member in tf:  # streamed: a huge header list is never held at once
            count += 1
            if count > MAX_MEMBERS:
                raise UnsafeArchive(f"{archive.name} has more than {MAX_MEMBERS:,} members")
            rel = _member_path(member.name, archive)
            if member.issym() or member.islnk():
                raise UnsafeArchive(f"{archive.name}: member {member.name!r} is a link to {member.linkname!r}; "
                                    "links are refused")
            if not (member.isfile() or member.isdir()):
                raise UnsafeArchive(f"{archive.name}: member {member.name!r} is a device, FIFO or other special "
                                    "file; only files and folders are extracted")
            out = _target(dest, rel, archive, member.name)
            if member.isdir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            src = tf.extractfile(member)
            if src is None:
                raise UnsafeArchive(f"{archive.name}: member {member.name!r} cannot be read")
            with src:
                _copy(src, out, budget)


def extract(archive: Path, dest: Path, max_bytes: int = MAX_TOTAL_BYTES) -> Path:
    """Extract ``archive`` into the existing folder ``dest``; UnsafeArchive (a JobFailed) if it is not safe.

    Nothing outside ``dest`` is ever written; on refusal ``dest`` may hold the members before the bad one,
    so callers extract into a fresh temporary folder and move it into place only on success.
    """
    archive = Path(archive)
    budget = _Budget(archive, max_bytes)
    try:
        if archive.name.lower().endswith(".zip"):
            _extract_zip(archive, dest, budget)
        else:
            _extract_tar(archive, dest, budget)
    except UnsafeArchive:
        raise
    except FileExistsError as exc:
        raise UnsafeArchive(f"{archive.name}: member {Path(exc.filename or '').name!r} appears twice") from None
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError) as exc:
        raise JobFailed(f"Cannot read the archive {archive}: {exc}",
                        "Check that the file is a complete .zip or .tar.gz archive.") from None
    return dest


def _cache_dir() -> Path:
    from engine.api import paths as paths_mod

    return paths_mod.resolve().home / "datasets"


def _content(folder: Path) -> Path:
    """What the loaders get: the one top folder an archive usually wraps, or the single data file in it."""
    entries = [p for p in folder.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    if len(entries) == 1 and entries[0].is_dir():
        return _content(entries[0])
    files = [p for p in entries if p.is_file()]
    if len(entries) == 1 and files:
        return files[0]
    return folder


def dataset_path(path: str | None) -> str | None:
    """``path`` itself, or for an archive the folder or file it safely unpacks to (extracted once)."""
    if not path or not is_archive(path):
        return path
    archive = Path(path).expanduser()
    try:
        st = archive.stat()
    except OSError:
        return path  # the loader reports the missing file with its own message
    if not archive.is_file():
        return path
    key = hashlib.sha256(f"{archive.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    stem = archive.name.split(".")[0][:40] or "data"
    final = _cache_dir() / f"{stem}-{key}"
    from engine.tasks.base import build_once

    # Racing ranks (torchrun): one extraction wins the rename, the others use its folder.
    build_once(final, lambda tmp: extract(archive, tmp))
    return str(_content(final))
