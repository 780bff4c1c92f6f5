"""Datasets given as archives: crafted malicious ones are refused without writing outside; good ones load."""

from __future__ import annotations

import io
import json
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from engine.api.train_spec import TrainSpec
from engine.tasks.safe_archive import UnsafeArchive, dataset_path, extract
from engine.training.context import JobFailed

pytestmark = pytest.mark.timeout(120)
TICKETS = Path(__file__).resolve().parents[2] / "engine" / "resources" / "datasets" / "support_tickets" / "train.jsonl"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    return info


def _zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def _snapshot(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


@pytest.fixture
def box(tmp_path):
    """<tmp>/box/dest is where archives extract; anything new elsewhere under <tmp> is an escape."""
    (tmp_path / "box" / "dest").mkdir(parents=True)
    return tmp_path


def _refused(box: Path, archive: Path, match: str) -> None:
    before = _snapshot(box) - _snapshot(box / "box" / "dest")
    with pytest.raises(UnsafeArchive, match=match) as err:
        extract(archive, box / "box" / "dest")
    assert err.value.hint  # a JobFailed with a hint, shown to the user as any bad input
    after = _snapshot(box) - _snapshot(box / "box" / "dest")
    assert after == before, f"written outside the target: {after - before}"
    assert not (Path("/tmp") / "ember-slip-PWNED").exists()


def test_tar_slip_absolute_and_dotdot_are_refused(box):
    _refused(box, _tar(box / "dotdot.tar.gz", [(_info("ok.txt"), b"x"), (_info("../../evil.txt"), b"boom")]), r"'\.\.'")
    _refused(box, _tar(box / "abs.tar", [(_info("/tmp/ember-slip-PWNED"), b"boom")], "w"), "absolute")
    _refused(box, _tar(box / "nested.tgz", [(_info("a/b/../../../evil.txt"), b"boom")]), r"'\.\.'")


def test_tar_links_devices_and_fifos_are_refused(box):
    # The classic escape: a symlink to a folder outside, then a file written "through" it.
    _refused(box, _tar(box / "sym.tar.gz", [(_info("link", tarfile.SYMTYPE, str(box)), None),
                                            (_info("link/evil.txt"), b"boom")]), "link")
    _refused(box, _tar(box / "symfile.tar.gz", [(_info("passwd", tarfile.SYMTYPE, "/etc/passwd"), None)]), "link")
    _refused(box, _tar(box / "hard.tar.gz", [(_info("h", tarfile.LNKTYPE, "../../outside"), None)]), "link")
    _refused(box, _tar(box / "dev.tar.gz", [(_info("null", tarfile.CHRTYPE), None)]), "device")
    _refused(box, _tar(box / "fifo.tar.gz", [(_info("pipe", tarfile.FIFOTYPE), None)]), "device")


def test_zip_slip_and_zip_symlinks_are_refused(box):
    _refused(box, _zip(box / "slip.zip", [("ok.txt", b"x"), ("../../evil.txt", b"boom")]), r"'\.\.'")
    _refused(box, _zip(box / "abs.zip", [("/tmp/ember-slip-PWNED", b"boom")]), "absolute")
    _refused(box, _zip(box / "win.zip", [("..\\..\\evil.txt", b"boom")]), r"'\.\.'")
    link = zipfile.ZipInfo("link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    _refused(box, _zip(box / "link.zip", [(link, str(box).encode())]), "symbolic link")


def test_size_is_bounded_by_what_is_written(box):
    # 4 MiB of zeros compress to a few KiB: the limit counts bytes as they are written, not the headers.
    bomb = _zip(box / "bomb.zip", [("zeros.bin", b"\0" * (4 << 20))])
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(UnsafeArchive, match="more than"):
        extract(bomb, box / "box" / "dest", max_bytes=1 << 20)
    (box / "box" / "dest2").mkdir()
    with pytest.raises(UnsafeArchive, match="twice"):
        extract(_tar(box / "dup.tar.gz", [(_info("a.txt"), b"1"), (_info("a.txt"), b"2")]), box / "box" / "dest2")


def test_not_an_archive_is_a_clear_error(box, tmp_path):
    bad = box / "broken.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(JobFailed, match="Cannot read the archive"):
        extract(bad, box / "box" / "dest")


def test_archived_datasets_load_for_training(tmp_path, monkeypatch):
    """A CSV/JSONL inside a .zip and an image folder inside a .tar.gz are unpacked once and used as-is."""
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "home"))
    from engine.preflight.data import inspect_data

    text_zip = _zip(tmp_path / "tickets.zip", [("tickets/train.jsonl", TICKETS.read_bytes())])
    spec = TrainSpec.model_validate({"task": "text_classification", "data": {"path": str(text_zip)}, "device": "cpu"})
    seen = inspect_data(spec, n=3)
    assert seen["kind"] == "table" and len(seen["rows"]) == 3 and seen["n_train"] > 10, seen["issues"]
    first = dataset_path(str(text_zip))
    assert first.endswith("train.jsonl") and str(tmp_path / "home" / "datasets") in first
    assert dataset_path(str(text_zip)) == first  # extracted once, reused

    from PIL import Image

    folder = tmp_path / "imgs" / "pets"
    for cls in ("cat", "dog"):
        (folder / cls).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (16, 16), (40 * i, 200 if cls == "cat" else 0, 0)).save(folder / cls / f"{i}.png")
    img_tar = tmp_path / "pets.tar.gz"
    with tarfile.open(img_tar, "w:gz") as tf:
        tf.add(folder, arcname="pets")
    shutil.rmtree(tmp_path / "imgs")
    spec = TrainSpec.model_validate({"task": "image_classification", "data": {"path": str(img_tar)},
                                     "method": {"kind": "full"}, "device": "cpu"})
    seen = inspect_data(spec, n=4)
    # The training split's counts: one of the 4 images per class is held out for validation.
    assert seen["class_counts"] == {"cat": 3, "dog": 3} and len(seen["thumbnails"]) == 4, seen["issues"]

    # A malicious archive as data.path: an issue on data.path, nothing written outside.
    evil = _zip(tmp_path / "evil.zip", [("../../evil.jsonl", json.dumps({"text": "x", "label": "a"}).encode())])
    spec = TrainSpec.model_validate({"task": "text_classification", "data": {"path": str(evil)}, "device": "cpu"})
    seen = inspect_data(spec, n=3)
    assert any("outside" in i["message"] and i["field"] == "data.path" for i in seen["issues"]), seen["issues"]
    assert not list(tmp_path.rglob("evil.jsonl"))
    assert not [p for p in (tmp_path / "home" / "datasets").iterdir() if p.name.startswith("evil")]
