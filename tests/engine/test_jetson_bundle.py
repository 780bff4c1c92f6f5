"""The Jetson bundle of a real exported model (the digits CNN): manifest, scripts, archive, infer.py fallback."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from engine.export import jetson_bundle, trtexec
from engine.training.context import JobFailed
from tests.engine.export_models import export_digits


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The built-in digits CNN exported with engine.compress.onnx_export, its labels, preprocessing and a batch."""
    from engine.export.triton import model_io

    out = export_digits(tmp_path_factory.mktemp("home"))
    inputs, outputs = model_io(out["path"])
    info = out["data"].info
    pre = {"size": [info["image_size"]] * 2, "channels": 3, "scale": 1 / 255, "mean": info["mean"],
           "std": info["std"], "layout": "NCHW"}
    return {"path": out["path"], "inputs": inputs, "outputs": outputs, "labels": list(info["label_names"]),
            "pre": pre, "pixels": out["batch"]["pixel_values"].numpy()}


def _write(digits, out: Path, *, target="orin_nano", jetpack=None, precision="fp16", dla_core=None):
    shapes = trtexec.profile_shapes(digits["inputs"], task_name="image_classification", max_batch=8, opt_batch=1)
    return jetson_bundle.write_bundle(
        out, onnx_files=[digits["path"]], inputs=digits["inputs"], outputs=digits["outputs"],
        task_name="image_classification", labels=digits["labels"], preprocessing=digits["pre"], tokenizer_dir=None,
        target=target, jetpack=jetpack, precision=precision, shapes=shapes, workspace_mb=512, dla_core=dla_core,
        source_run="r20250101-000000-abcdef", spec_sha256="ab" * 32, benchmark_s=5)


def test_bundle_manifest_verifies_and_detects_changes(digits, tmp_path):
    out = tmp_path / "jetson" / "digits"
    bundle = _write(digits, out)
    assert bundle["path"] == str(out)
    expected = {"model.onnx", "labels.json", "preprocess.json", "build_engine.sh", "benchmark.sh", "infer.py",
                "README.md", "manifest.json"}
    assert set(bundle["files"]) == expected == {p.name for p in out.iterdir()}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == bundle["manifest"]
    assert set(manifest["files"]) == expected - {"manifest.json"}
    for rel, entry in manifest["files"].items():
        assert entry["sha256"] == hashlib.sha256((out / rel).read_bytes()).hexdigest()
    assert (manifest["target"], manifest["jetpack"], manifest["tensorrt"], manifest["cuda"], manifest["l4t"]) == \
        ("orin_nano", "6.2.1", "10.3.0", "12.6", "36.4.4")
    assert manifest["precision"] == "fp16" and manifest["source_run"] == "r20250101-000000-abcdef"
    assert manifest["shapes"] == {"pixel_values": {"min": [1, 3, 32, 32], "opt": [1, 3, 32, 32],
                                                   "max": [8, 3, 32, 32]}}
    assert jetson_bundle.verify_bundle(out) == []

    (out / "model.plan").write_bytes(b"built on the device")  # what build_engine.sh adds is allowed
    assert jetson_bundle.verify_bundle(out) == []
    labels = (out / "labels.json").read_text()
    (out / "labels.json").write_text(labels.replace('"3"', '"8"'))
    (out / "notes.txt").write_text("stray")
    problems = jetson_bundle.verify_bundle(out)
    assert any(p.startswith("labels.json") and "sha256" in p for p in problems)
    assert "notes.txt is not in the manifest" in problems
    (out / "infer.py").unlink()
    assert "infer.py is missing" in jetson_bundle.verify_bundle(out)
    (out / "manifest.json").unlink()
    assert jetson_bundle.verify_bundle(out) == ["manifest.json is missing: the bundle is incomplete"]


def test_build_script_trtexec_line_for_tensorrt_8_2_and_10_3(digits, tmp_path):
    orin = _write(digits, tmp_path / "orin", target="orin_nano", jetpack="6.1")
    nano = _write(digits, tmp_path / "nano", target="nano", jetpack="4.6.1")
    line10 = next(x for x in (tmp_path / "orin" / "build_engine.sh").read_text().splitlines() if "--onnx=" in x)
    line8 = next(x for x in (tmp_path / "nano" / "build_engine.sh").read_text().splitlines() if "--onnx=" in x)
    shape_flags = ("--minShapes=pixel_values:1x3x32x32 --optShapes=pixel_values:1x3x32x32 "
                   "--maxShapes=pixel_values:8x3x32x32")
    assert line10 == ('"$TRT" --onnx=model.onnx --saveEngine=model.plan --memPoolSize=workspace:512M --fp16 '
                      f"{shape_flags} --skipInference 2>&1 | tee build.log")
    assert line8 == ('"$TRT" --onnx=model.onnx --saveEngine=model.plan --workspace=512 --fp16 '
                     f"{shape_flags} --skipInference 2>&1 | tee build.log")
    assert orin["manifest"]["tensorrt"] == "10.3.0" and nano["manifest"]["tensorrt"] == "8.2.1"
    bench = (tmp_path / "orin" / "benchmark.sh").read_text()
    assert '"$TRT" --loadEngine=model.plan --shapes=pixel_values:1x3x32x32 --warmUp=500 --duration=5' in bench
    assert "tee benchmark.log" in bench
    with pytest.raises(JobFailed, match="cannot build int8 engines"):
        _write(digits, tmp_path / "nano8", target="nano", precision="int8")
    with pytest.raises(JobFailed, match="no DLA core"):
        _write(digits, tmp_path / "dla", target="orin_nano", dla_core=0)


def test_build_script_checks_hashes_and_finds_no_trtexec_here(digits, tmp_path):
    out = tmp_path / "b"
    _write(digits, out)
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]), "HOME": str(tmp_path)}
    if shutil.which("trtexec", path=env["PATH"]) or Path("/usr/src/tensorrt/bin/trtexec").exists():
        pytest.skip("this machine has trtexec")
    run = subprocess.run(["bash", str(out / "build_engine.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "trtexec not found" in run.stderr and "TRTEXEC" in run.stderr
    (out / "preprocess.json").write_text("{}")
    run = subprocess.run(["bash", str(out / "build_engine.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "does not match manifest.json" in run.stderr


def test_infer_py_falls_back_to_onnx_runtime_and_archive(digits, tmp_path):
    out = tmp_path / "b"
    _write(digits, out)
    pixels = digits["pixels"]
    np.savez(tmp_path / "in.npz", **{"b0.pixel_values": pixels})
    run = subprocess.run([sys.executable, str(out / "infer.py"), "--npz", str(tmp_path / "in.npz"), "--out",
                          str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "no model.plan" in run.stderr and "ONNX Runtime" in run.stderr
    import onnxruntime as ort

    ref = ort.InferenceSession(str(digits["path"]), providers=["CPUExecutionProvider"]).run(
        ["logits"], {"pixel_values": pixels})[0]
    assert np.abs(np.load(tmp_path / "out.npz")["b0"] - ref).max() < 1e-5
    np.save(tmp_path / "one.npy", pixels[:1])
    run = subprocess.run([sys.executable, str(out / "infer.py"), str(tmp_path / "one.npy")], capture_output=True,
                         text=True, timeout=120)
    line = json.loads(run.stdout.strip().splitlines()[0])
    assert line["backend"] == "onnxruntime" and line["label"] == digits["labels"][int(ref[0].argmax())]

    archive = jetson_bundle.write_archive(out, tmp_path / "b.tar.gz")
    assert archive["bytes"] == (tmp_path / "b.tar.gz").stat().st_size
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"b/manifest.json", "b/model.onnx", "b/build_engine.sh"} <= names
    assert not list(tmp_path.glob(".b.tar.gz.tmp-*"))


def test_an_interrupted_write_leaves_no_manifest_and_no_bundle(digits, tmp_path, monkeypatch):
    out = tmp_path / "jetson" / "digits"
    real = shutil.copyfile

    def copy(src, dst, *args, **kwargs):
        if Path(dst).name == "infer.py":  # after model.onnx was written: the disk fills midway
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(jetson_bundle.shutil, "copyfile", copy)
    with pytest.raises(JobFailed) as info:
        _write(digits, out)
    assert "No space left on device" in str(info.value) and "GB free" in str(info.value)
    assert "free space" in info.value.hint
    assert not out.exists()
    assert list((tmp_path / "jetson").iterdir()) == []  # no temporary folder left, no manifest anywhere
    assert not list(tmp_path.rglob("manifest.json"))

    monkeypatch.setattr(jetson_bundle.shutil, "copyfile", real)
    _write(digits, out)  # a whole bundle; a failed rewrite keeps it as it was
    before = jetson_bundle.verify_bundle(out)
    monkeypatch.setattr(jetson_bundle.shutil, "copyfile", copy)
    with pytest.raises(JobFailed):
        _write(digits, out, jetpack="6.1")
    assert before == [] and jetson_bundle.verify_bundle(out) == []
    assert json.loads((out / "manifest.json").read_text())["jetpack"] == "6.2.1"
    assert [p.name for p in (tmp_path / "jetson").iterdir()] == ["digits"]


def _mount_tmpfs(where: Path, size_kb: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    return done.returncode == 0


def test_a_really_full_disk_fails_the_bundle_cleanly_and_it_works_once_space_is_freed(digits, tmp_path):
    """A real small filesystem (tmpfs) rather than an injected error: the write fails with ENOSPC itself."""
    disk = tmp_path / "small-disk"
    model_kb = digits["path"].stat().st_size // 1024
    if os.geteuid() != 0 or not _mount_tmpfs(disk, max(64, model_kb // 2)):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the injected-error test above covers the logic")
    try:
        out = disk / "jetson" / "digits"
        with pytest.raises(JobFailed) as info:
            _write(digits, out)
        assert "No space left on device" in str(info.value) and "free space" in info.value.hint
        assert not out.exists() and not list(disk.rglob("manifest.json"))
        assert not [p for p in disk.rglob("*") if p.is_file()]  # nothing half-written left to fill the disk
        # Space freed (the filesystem grown): the same call writes a whole bundle that verifies.
        subprocess.run(["mount", "-o", f"remount,size={model_kb * 4 + 1024}k", str(disk)], check=True)
        _write(digits, out)
        assert jetson_bundle.verify_bundle(out) == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
