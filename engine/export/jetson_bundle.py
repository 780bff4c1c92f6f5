"""The Jetson bundle: everything a Jetson needs to build, time and run the model, checked by a manifest.

``jetson/<name>/`` holds ``model.onnx`` (+ its external data), ``labels.json``, ``preprocess.json``, the tokenizer
files, ``build_engine.sh`` (trtexec with the precision, min/opt/max shapes, workspace and DLA options for the
target's TensorRT; see ``engine.export.trtexec``), ``benchmark.sh``, ``infer.py`` (TensorRT with ONNX Runtime as
the fallback), ``README.md`` and ``manifest.json``: sha256 and size of every other file, the source run, the
target and the JetPack / L4T / TensorRT / CUDA it expects, precision and shapes.

The engine itself is never built here: a TensorRT engine only runs on the GPU and TensorRT version it was built
with, so ``build_engine.sh`` builds it on the device (after checking every file against the manifest).

Writing is all-or-nothing: the bundle is written into a temporary sibling folder, the manifest last, and the
folder is renamed into place at the end. A write that fails midway (a full disk) leaves no folder and no
manifest behind, so a half bundle is never taken for a complete one. Templates: ``templates/build_engine.sh.in``,
``benchmark.sh.in``, ``jetson_infer.py``, ``jetson_README.md``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shlex
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from engine.export import jetson_profiles, trtexec
from engine.training.context import JobFailed

TEMPLATES = Path(__file__).resolve().parent / "templates"
MANIFEST = "manifest.json"
# written on the device by the scripts; not part of the bundle but allowed beside it
DEVICE_OUTPUTS = frozenset({"model.plan", "build.log", "benchmark.log", "benchmark.json"})
FORMAT = "ember.jetson-bundle/1"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fill_template(template: str, values: dict[str, str]) -> str:
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def _disk_error(exc: OSError, where: Path) -> JobFailed:
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = f"{shutil.disk_usage(probe).free / 1e9:.2f} GB free"
    except OSError:
        free = "free space unknown"
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return JobFailed(f"writing the Jetson bundle in {where} failed: {exc.strerror or exc} (disk of {probe}: {free})",
                     "free space on that disk (the bundle needs about twice the model's size while it is written), "
                     "then export again; nothing half-written was kept." if full else
                     "check that the folder is writable, then export again; nothing half-written was kept.")


def _shapes_text(shapes: dict[str, dict[str, list[int]]]) -> str:
    if not shapes:
        return "- all inputs have fixed shapes"
    return "\n".join(f"- `{name}`: {'x'.join(map(str, s['min']))} / {'x'.join(map(str, s['opt']))} / "
                     f"{'x'.join(map(str, s['max']))}" for name, s in shapes.items())


def check_target(target: str, jetpack: str | None, precision: str, dla_core: int | None) -> dict[str, Any]:
    """The target's profile, once its JetPack, precision and DLA core are known to exist there."""
    prof = jetson_profiles.profile(target)
    jetson_profiles.jetpack_versions(target, jetpack)
    if precision not in prof["precisions"]:
        raise JobFailed(f"{prof['title']} cannot build {precision} engines",
                        f"use precision {' or '.join(prof['precisions'])}"
                        + (f" ({prof['precision_note']})" if prof.get("precision_note") else "") + ".")
    if dla_core is not None and not 0 <= dla_core < prof["dla_cores"]:
        raise JobFailed(f"{prof['title']} has no DLA core {dla_core} (it has {prof['dla_cores']})",
                        "leave dla_core empty to build for the GPU." if not prof["dla_cores"] else
                        f"use dla_core 0..{prof['dla_cores'] - 1}.")
    return prof


def write_bundle(out_dir: str | Path, *, onnx_files: list[Path], inputs: list[dict[str, Any]],
                 outputs: list[dict[str, Any]], task_name: str, labels: list[str], preprocessing: dict[str, Any],
                 tokenizer_dir: Path | None, target: str, jetpack: str | None, precision: str,
                 shapes: dict[str, dict[str, list[int]]], workspace_mb: int, dla_core: int | None,
                 source_run: str, spec_sha256: str | None, benchmark_s: float) -> dict[str, Any]:
    """Write the bundle at ``out_dir`` (replacing one there); returns {path, files, manifest}."""
    out_dir = Path(out_dir)
    prof = check_target(target, jetpack, precision, dla_core)
    versions = jetson_profiles.jetpack_versions(target, jetpack)
    onnx_files = [Path(p) for p in onnx_files]
    if not onnx_files or not onnx_files[0].is_file():
        raise JobFailed(f"no ONNX model to bundle ({onnx_files[0] if onnx_files else 'none given'})",
                        "export format onnx first.")
    missing = [str(p) for p in onnx_files[1:] if not p.is_file()]
    if missing:
        raise JobFailed(f"the ONNX model's external data is missing: {', '.join(missing)}",
                        "export format onnx again.")
    trt_version = versions["tensorrt"]
    build = trtexec.build_command("model.onnx", "model.plan", precision=precision, shapes=shapes,
                                  workspace_mb=workspace_mb, dla_core=dla_core, tensorrt_version=trt_version)
    bench = trtexec.bench_command("model.plan", shapes=shapes, duration_s=benchmark_s, tensorrt_version=trt_version,
                                  dla_core=dla_core)
    name = out_dir.name
    values = {"TITLE": prof["title"], "JETPACK": versions["jetpack"], "TENSORRT": trt_version,
              "CUDA": versions["cuda"], "L4T": versions["l4t"], "PRECISION": precision, "NAME": name,
              "SOURCE_RUN": source_run, "TASK": task_name, "SECONDS": f"{benchmark_s:g}",
              "SHAPES": _shapes_text(shapes),
              "EXAMPLE": "digit.png" if task_name == "image_classification" else '"some text to classify"'}

    def fill(tmp: Path) -> None:
        shutil.copyfile(onnx_files[0], tmp / "model.onnx")
        for extra in onnx_files[1:]:  # external data keeps the file name the model refers to
            shutil.copyfile(extra, tmp / extra.name)
        (tmp / "labels.json").write_text(json.dumps(list(labels), indent=1), encoding="utf-8")
        (tmp / "preprocess.json").write_text(json.dumps(preprocessing, indent=1, default=str), encoding="utf-8")
        if tokenizer_dir is not None:
            from engine.export.metadata import tokenizer_files

            for src in tokenizer_files(Path(tokenizer_dir)):  # only the tokenizer: never the base model's weights
                shutil.copyfile(src, tmp / src.name)
        shutil.copyfile(TEMPLATES / "jetson_infer.py", tmp / "infer.py")
        (tmp / "README.md").write_text(fill_template("jetson_README.md", values), encoding="utf-8")
        for script, args in (("build_engine.sh", build), ("benchmark.sh", bench)):
            text = fill_template(f"{script}.in", {**values, "TRT_ARGS": " ".join(shlex.quote(a) for a in args[1:])})
            write_script(tmp / script, text)

    manifest = {
        "format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "source_run": source_run,
        "spec_sha256": spec_sha256, "task": task_name, "target": target, "target_title": prof["title"],
        "jetpack": versions["jetpack"], "l4t": versions["l4t"], "tensorrt": trt_version,
        "cuda": versions["cuda"], "precision": precision, "shapes": shapes, "workspace_mb": workspace_mb,
        "dla_core": dla_core, "benchmark_s": benchmark_s, "inputs": inputs, "outputs": outputs,
        "labels": len(labels), "commands": {"build": build, "benchmark": bench},
    }
    return write_folder(out_dir, fill, manifest)


def write_script(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def write_folder(out_dir: Path, fill: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """A bundle written all-or-nothing: ``fill(tmp)`` writes the files into a temporary sibling, the manifest
    (``manifest`` plus every file's sha256 and size) goes last, then the folder is renamed into place
    (replacing one there). Returns {path, files, manifest}."""
    out_dir = Path(out_dir)
    name = out_dir.name
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        fill(tmp)
        files = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            rel = path.relative_to(tmp).as_posix()
            files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        manifest = {**manifest, "files": files}
        part = tmp / f"{MANIFEST}.part"
        part.write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")
        os.replace(part, tmp / MANIFEST)  # last: a bundle without its manifest is incomplete
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{name}.old-{os.getpid()}")
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _disk_error(exc, out_dir) from exc
    return {"path": str(out_dir), "files": sorted([*files, MANIFEST]), "manifest": manifest}


def write_archive(bundle_dir: str | Path, tar_path: str | Path) -> dict[str, Any]:
    """``bundle_dir`` as a .tar.gz whose top folder is the bundle's name; written to a temp name, then renamed."""
    bundle_dir, tar_path = Path(bundle_dir), Path(tar_path)
    if not (bundle_dir / MANIFEST).is_file():
        raise JobFailed(f"{bundle_dir} is not a complete Jetson bundle (no {MANIFEST})", "export format jetson again.")
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tar_path.with_name(f".{tar_path.name}.tmp-{os.getpid()}")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for path in sorted(p for p in bundle_dir.rglob("*") if p.is_file()):
                tar.add(path, arcname=f"{bundle_dir.name}/{path.relative_to(bundle_dir).as_posix()}")
        os.replace(tmp, tar_path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _disk_error(exc, tar_path.parent) from exc
    return {"path": str(tar_path), "bytes": tar_path.stat().st_size}


def verify_bundle(bundle_dir: str | Path) -> list[str]:
    """Problems with a bundle: no manifest, a file missing, changed (size or sha256) or not in the manifest.
    An empty list means it is whole. Files the device scripts write (model.plan, logs) are allowed."""
    bundle_dir = Path(bundle_dir)
    path = bundle_dir / MANIFEST
    if not path.is_file():
        return [f"{MANIFEST} is missing: the bundle is incomplete"]
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{MANIFEST} is unreadable: {exc}"]
    problems = []
    for rel, want in sorted(files.items()):
        f = bundle_dir / rel
        if not f.is_file():
            problems.append(f"{rel} is missing")
        elif f.stat().st_size != want.get("bytes"):
            problems.append(f"{rel} has {f.stat().st_size} bytes, the manifest says {want.get('bytes')}")
        elif sha256_file(f) != want.get("sha256"):
            problems.append(f"{rel} does not match its sha256 in the manifest (changed or damaged)")
    for f in sorted(p for p in bundle_dir.rglob("*") if p.is_file()):
        rel = f.relative_to(bundle_dir).as_posix()
        if rel not in files and rel != MANIFEST and rel not in DEVICE_OUTPUTS:
            problems.append(f"{rel} is not in the manifest")
    return problems
