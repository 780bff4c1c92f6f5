"""lm-evaluation-harness benchmarks on a model the job has already loaded (docs/evaluate.md).

The model object goes to lm-eval's ``HFLM`` as it is (``pretrained=model, tokenizer=tokenizer``): a LoRA
run is evaluated as engine/inference/models.py merged it, and no second copy is loaded.

Tasks come from lm-eval's own catalogue or from YAML files in ``include_path``. Tasks defined there run
offline: before any Hugging Face library is imported the job sets ``HF_HUB_OFFLINE=1`` and
``HF_DATASETS_OFFLINE=1``, and the datasets cache goes into the job's folder. A task file's relative
``data_files`` are read from ``include_path`` (lm-eval runs with it as the working folder). Tasks from
lm-eval's catalogue download their datasets from the Hugging Face Hub, so they need the network (or the
datasets already in the cache).
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.training.context import JobFailed

BOOTSTRAP_ITERS = 1000  # stderr of metrics without a closed form (BLEU-like); lm-eval's 100,000 takes minutes
LIST_HINT = "`lm-eval ls tasks` lists lm-eval's own tasks"


def _yaml_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """Reads lm-eval task files without running their tags (``!function utils.process_docs``)."""

    Loader.add_multi_constructor("", lambda _loader, _suffix, _node: None)
    return Loader


def local_names(include_path: Path) -> set[str]:
    """The task, group and tag names the YAML files under ``include_path`` define (read without lm-eval)."""
    import yaml

    loader = _yaml_loader()
    names: set[str] = set()
    for path in sorted([*include_path.rglob("*.yaml"), *include_path.rglob("*.yml")]):
        try:
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - a SafeLoader
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        for key in ("task", "group", "tag"):
            value = doc.get(key)
            for name in value if isinstance(value, list) else [value]:
                if isinstance(name, str):
                    names.add(name)
    return names


def check_include_path(include_path: str | None) -> Path | None:
    if include_path is None:
        return None
    folder = Path(include_path).expanduser()
    if not folder.is_dir():
        raise JobFailed(f"lm_eval.include_path {include_path} is not a folder",
                        "Give the folder that holds your task YAML files (an absolute path on the machine that "
                        "runs the engine).")
    return folder


def all_local(tasks: list[str], include_path: Path | None) -> bool:
    """Whether every task is defined by a YAML file under ``include_path`` (so it can run offline)."""
    if include_path is None:
        return False
    names = local_names(include_path)
    return all(any(fnmatch.fnmatchcase(n, t) for n in names) for t in tasks)


def set_environment(local: bool, run_dir: Path) -> None:
    """Before any Hugging Face import: local tasks offline, with their datasets cache in the job's folder.

    Ember's loaders default HF_HUB_OFFLINE to 1 (they never download weights); a task from lm-eval's
    catalogue needs the Hub for its dataset, so there it defaults to 0 unless the user set it."""
    if local:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        os.environ.setdefault("HF_DATASETS_CACHE", str(run_dir / "datasets-cache"))
    else:
        os.environ.setdefault("HF_HUB_OFFLINE", "0")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "0")


def task_manager(include_path: Path | None, local: bool) -> Any:
    """lm-eval's TaskManager; local tasks only index ``include_path`` (lm-eval's catalogue takes seconds)."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as exc:  # the one-folder build leaves lm-eval out (docs/packaging.md)
        raise JobFailed(f"lm-eval is not installed here ({exc})",
                        "Install Ember Studio with pip (pip install -c constraints.txt .) to run lm-eval tasks; "
                        "the answer scores need no lm-eval.") from exc

    return TaskManager(include_path=str(include_path) if include_path else None, include_defaults=not local)


def resolve(tasks: list[str], manager: Any, include_path: Path | None) -> list[str]:
    """The task names to run (globs expanded); JobFailed naming each unknown one and how to fix it."""
    known = manager.all_tasks
    out: list[str] = []
    unknown = []
    for name in tasks:
        found = [n for n in known if fnmatch.fnmatchcase(n, name)] if any(c in name for c in "*?[") else \
            ([name] if name in known else [])
        if not found:
            unknown.append(name)
        out += [n for n in found if n not in out]
    if unknown:
        close = sorted({c for name in unknown for c in difflib.get_close_matches(name, known, n=3, cutoff=0.75)})
        where = f"add a YAML file with `task: {unknown[0]}` under {include_path}" if include_path else \
            "set lm_eval.include_path to a folder of task YAML files that defines it"
        raise JobFailed(f"Unknown lm-eval task{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                        (f"Did you mean {', '.join(close)}? " if close else "") +
                        f"Check the spelling ({LIST_HINT}), or {where} (docs/evaluate.md).")
    return out


@contextlib.contextmanager
def _working_folder(folder: Path | None) -> Iterator[None]:
    """Relative ``data_files`` in a task file are read from its folder (include_path)."""
    if folder is None:
        yield
        return
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None  # lm-eval writes "N/A" for a stderr it could not compute
    return number if math.isfinite(number) else None


def entries(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (task, metric, filter): value, stderr, higher_is_better and the documents scored."""
    out = []
    counts = results.get("n-samples") or {}
    better = results.get("higher_is_better") or {}
    for task, metrics in (results.get("results") or {}).items():
        for key, value in metrics.items():
            name, sep, filt = key.partition(",")
            if not sep or name.endswith("_stderr"):
                continue
            out.append({"task": task, "metric": name, "filter": filt, "value": _number(value),
                        "stderr": _number(metrics.get(f"{name}_stderr,{filt}")),
                        "higher_is_better": (better.get(task) or {}).get(name),
                        "docs": (counts.get(task) or {}).get("effective"),
                        "docs_total": (counts.get(task) or {}).get("original")})
    return out


def run(model: Any, tokenizer: Any, spec: Any, tasks: list[str], manager: Any, include_path: Path | None,
        on_task: Callable[[int, str], None] = lambda _i, _name: None,
        stop: Callable[[], bool] = lambda: False) -> dict[str, Any] | None:
    """result.json's ``lm_eval``: each task's metrics, the settings and times; None when stopped."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=spec.batch_size)
    rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    versions: dict[str, Any] = {}
    for i, name in enumerate(tasks):
        if stop():
            return None
        on_task(i, name)
        t0 = time.perf_counter()
        with _working_folder(include_path):
            results = lm_eval.simple_evaluate(
                model=lm, tasks=[name], num_fewshot=spec.num_fewshot, limit=spec.limit, task_manager=manager,
                log_samples=False, bootstrap_iters=BOOTSTRAP_ITERS, apply_chat_template=spec.apply_chat_template,
                fewshot_as_multiturn=spec.apply_chat_template)
        seconds[name] = time.perf_counter() - t0
        if results is None:
            continue
        rows += entries(results)
        versions.update(results.get("versions") or {})
    return {"tasks": rows, "seconds": seconds, "versions": versions, "lm_eval_version": lm_eval.__version__,
            "limit": spec.limit, "num_fewshot": spec.num_fewshot, "apply_chat_template": spec.apply_chat_template,
            "include_path": str(include_path) if include_path else None}
