"""evaluate.model: score a finished run, a compression variant or a base model (docs/evaluate.md).

Reads the model the way the Playground opens it (engine/inference/models.py: a run with its LoRA merged,
a built-in, a folder, a model in the Hugging Face cache), then

- a language model: its greedy answers to the data's prompts, scored against the references (exact match,
  token F1, ROUGE-L, BLEU, chrF: engine/evaluate/answers.py);
- a text classifier: accuracy and macro F1 on labelled rows (engine/evaluate/labelled.py);
- optionally lm-evaluation-harness tasks on the same loaded model (engine/evaluate/benchmarks.py).

The data is a JSONL (or, for a classifier, CSV) file, a built-in dataset's validation file, or a run's own
validation split (the default for a run). Every input is checked before the model loads. Writes
``result.json``; the engine records the evaluated run as the job's parent, so the result is listed with it
(``evaluations.list``). Run by hand:

    python -m engine.recipes.evaluate --run-dir DIR   # DIR/spec.yaml holds {kind, spec}; DIR's parent holds the runs
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.api.specs import EvaluateSpec, ServeSpec
from engine.evaluate import benchmarks
from engine.training.context import JobContext, JobFailed, exit_process, run_job

MAX_PARENTS = 8  # a variant of a variant of a fine-tune is 2 generations


@dataclass
class Data:
    """The rows to score and where they came from (result.json's ``data``)."""

    about: dict[str, Any]
    messages: list[list[dict[str, str]]] = field(default_factory=list)  # a language model's rows
    texts: list[str] = field(default_factory=list)  # a classifier's rows
    labels: list[str] = field(default_factory=list)


def progress(ctx: JobContext, stage: str, fraction: float, message: str) -> None:
    ctx.emit("progress", stage=stage, fraction=round(min(max(fraction, 0.0), 1.0), 3), message=message)
    ctx.log(message)


# ---------------------------------------------------------------- inputs (no torch)


def _root(runs: Path, job_id: str) -> str:
    """The fine-tune a variant was made from (its own id for a fine-tune): whose validation data it shares."""
    from engine.trainer.source import read_meta

    current = job_id
    for _ in range(MAX_PARENTS):
        parent = read_meta(runs / current).get("parent_run")
        if not parent or not (runs / parent / "model").is_dir():
            return current
        current = parent
    return current


def model_task(spec: EvaluateSpec, runs: Path) -> tuple[str, Any]:
    """(the model's task, its run's Source or None); a run that cannot be evaluated fails here."""
    if not spec.model.run:
        return "causal_lm", None  # a built-in, a folder or a Hub id opens as a language model
    from engine.trainer.source import open_source

    source = open_source(runs / spec.model.run)
    task = source.spec.task
    if task not in ("causal_lm", "text_classification"):
        raise JobFailed(f"{spec.model.run} is an {task.replace('_', ' ')} model; evaluate.model scores language "
                        "models and text classifiers", "Pick a language model or a text classifier run.")
    if task == "causal_lm" and source.weights_file().suffix == ".onnx":
        raise JobFailed(f"{spec.model.run} is an ONNX variant of a language model; answers are generated with "
                        "torch models", "Evaluate its parent run, or a merged or pruned variant.")
    if task != "causal_lm" and spec.lm_eval is not None:
        raise JobFailed(f"lm_eval tasks run on language models; {spec.model.run} is a text classifier",
                        "Remove lm_eval, or evaluate a language model.")
    return task, source


def _builtin_files(task: str) -> dict[str, Path]:
    if task == "causal_lm":
        from engine.tasks.causal_lm import DATASETS
    else:
        from engine.tasks.text_classification import BUILTIN_DATASETS as DATASETS
    return {name: folder / "validation.jsonl" for name, folder in DATASETS.items()}


def _columns(spec: EvaluateSpec, source: Any) -> tuple[str, str]:
    data = source.spec.data if source is not None else None
    return (spec.text_column or (data.text_column if data else "text"),
            spec.label_column or (data.label_column if data else "label"))


def _from_file(spec: EvaluateSpec, task: str, source: Any) -> Data:
    from engine.evaluate import answers, labelled

    assert spec.data is not None
    builtins = _builtin_files(task)
    if spec.data in builtins:
        path, about = builtins[spec.data], {"source": "builtin", "name": spec.data}
    else:
        path = Path(spec.data).expanduser()
        about = {"source": "file", "path": str(path)}
        if not path.is_file():
            what = "is a folder, not a file" if path.is_dir() else "not found"
            raise JobFailed(f"Data file {spec.data} {what}",
                            "Give the absolute path of a JSONL file on the machine that runs the engine "
                            f"({'prompt/response or messages rows' if task == 'causal_lm' else 'text and label columns'}"
                            f"), a built-in dataset ({', '.join(builtins)}), or leave data empty to use the run's "
                            "validation data.")
    about["label"] = about.get("name") or path.name
    if task == "causal_lm":
        return Data(about, messages=answers.read_messages(path))
    texts, labels = labelled.read_labelled(path, *_columns(spec, source))
    return Data(about, texts=texts, labels=labels)


def _from_run(spec: EvaluateSpec, task: str, runs: Path, job_id: str) -> Data:
    from engine.trainer import source as src

    if not (runs / job_id).is_dir():
        raise JobFailed(f"No run {job_id} (validation_of)", "Pick a finished run from the Runs page (`ember jobs`).")
    source = src.open_source(runs / job_id)
    if source.spec.task != task:
        raise JobFailed(f"Run {job_id} holds {source.spec.task.replace('_', ' ')} data; the model is a "
                        f"{task.replace('_', ' ')} model", "Pick a run of the same kind as the model, or a data file.")
    data = src.load_data(source)
    about = {"source": "validation", "run": _root(runs, job_id), "label": f"validation data of {_root(runs, job_id)}"}
    if task == "causal_lm":
        return Data(about, messages=list(data.val_messages or []))
    names = data.info.get("label_names") or []
    return Data(about, texts=list(data.val.texts), labels=[names[item["labels"]] for item in data.val.items])


def read_data(spec: EvaluateSpec, task: str, source: Any, runs: Path) -> Data | None:
    """The rows to score, cut to ``limit`` (the first rows, so every model sees the same ones)."""
    if not spec.generation:
        return None
    data = _from_file(spec, task, source) if spec.data else \
        _from_run(spec, task, runs, spec.validation_of or str(spec.model.run))
    rows = len(data.messages) if task == "causal_lm" else len(data.texts)
    if rows == 0:
        raise JobFailed(f"No rows to score in the {data.about['label']}",
                        "Point data at a file with rows, or fine-tune with a validation split.")
    keep = spec.limit or rows
    data.messages, data.texts, data.labels = data.messages[:keep], data.texts[:keep], data.labels[:keep]
    data.about.update(rows=rows, scored=min(keep, rows))
    return data


def open_ref(spec: EvaluateSpec | ServeSpec, runs: Path) -> dict[str, Any]:
    """What engine/inference/models.py opens: a run becomes its folder."""
    if spec.model.run:
        return {"run_dir": str(runs / spec.model.run)}
    return spec.model.model_dump(exclude_none=True)


# ---------------------------------------------------------------- the job


def main(ctx: JobContext, spec: EvaluateSpec) -> str | None:
    t_start = time.perf_counter()
    runs = Path(ctx.run_dir).resolve().parent
    include, tasks, manager, local = None, [], None, True
    if spec.lm_eval is not None:
        include = benchmarks.check_include_path(spec.lm_eval.include_path)
        local = benchmarks.all_local(spec.lm_eval.tasks, include)
        if not local:
            ctx.log("lm-eval tasks from its catalogue: their datasets come from the Hugging Face Hub")
    benchmarks.set_environment(local, Path(ctx.run_dir))  # before anything imports a Hugging Face library
    progress(ctx, "check", 0.01, f"checking {spec.model.label()} and the data")
    task, source = model_task(spec, runs)
    data = read_data(spec, task, source, runs)
    if spec.lm_eval is not None:
        progress(ctx, "check", 0.05, "finding the lm-eval tasks")
        manager = benchmarks.task_manager(include, local)
        tasks = benchmarks.resolve(spec.lm_eval.tasks, manager, include)

    from engine.inference.models import open_model, pick_device

    device = pick_device(spec.device)
    progress(ctx, "load", 0.08, f"loading {spec.model.label()} on {device}")
    t0 = time.perf_counter()
    kind, loaded, info = open_model(open_ref(spec, runs), device)
    timings: dict[str, float] = {"load_s": time.perf_counter() - t0}
    result: dict[str, Any] = {
        "version": 1,
        "model": {"ref": spec.model.model_dump(exclude_none=True), "label": spec.model.label(), "kind": kind,
                  "task": info.get("task", task), "run": spec.model.run, "variant": info.get("variant") or None,
                  "device": device},
        "data": data.about if data else None,
        "settings": {"limit": spec.limit, "max_new_tokens": spec.max_new_tokens, "batch_size": spec.batch_size},
        "generation": None, "classification": None, "lm_eval": None, "timings": timings,
    }
    share = 0.85 if spec.lm_eval is None else 0.45  # of the progress bar, for the data's rows

    if data is not None:
        n = len(data.messages) if kind == "chat" else len(data.texts)

        def advance(done: int) -> None:
            progress(ctx, "generate" if kind == "chat" else "classify", 0.1 + share * done / n,
                     f"{'answered' if kind == 'chat' else 'classified'} {done}/{n} rows")

        t0 = time.perf_counter()
        if kind == "chat":
            from engine.evaluate import answers

            scored = answers.evaluate(loaded.model, loaded.tokenizer, data.messages, spec.max_new_tokens,
                                      spec.batch_size, advance, lambda: ctx.stop_requested)
            result["generation"] = scored
        else:
            from engine.evaluate import labelled

            scored = labelled.evaluate(loaded, data.texts, data.labels, spec.batch_size, advance,
                                       lambda: ctx.stop_requested)
            result["classification"] = scored
        timings["generation_s"] = time.perf_counter() - t0
        if scored is None:
            return _finish(ctx, result, t_start, "stopped")
        ctx.emit("eval", step=0, metrics=scored["metrics"])
        ctx.log("scores: " + ", ".join(f"{k} {v:.4f}" for k, v in scored["metrics"].items()))

    if spec.lm_eval is not None:
        base = 0.1 + (share if data is not None else 0.0)

        def on_task(i: int, name: str) -> None:
            progress(ctx, "lm_eval", base + (0.95 - base) * i / len(tasks), f"lm-eval task {i + 1}/{len(tasks)}: {name}")

        t0 = time.perf_counter()
        found = benchmarks.run(loaded.model, loaded.tokenizer, spec.lm_eval, tasks, manager, include, on_task,
                               lambda: ctx.stop_requested)
        timings["lm_eval_s"] = time.perf_counter() - t0
        if found is None:
            return _finish(ctx, result, t_start, "stopped")
        result["lm_eval"] = found
        for row in found["tasks"]:
            ctx.log(f"lm-eval {row['task']} {row['metric']}: {row['value']}"
                    + (f" ± {row['stderr']:.4f}" if row["stderr"] is not None else "") + f" ({row['docs']} docs)")
    return _finish(ctx, result, t_start, None)


def _finish(ctx: JobContext, result: dict[str, Any], t_start: float, state: str | None) -> str | None:
    import shutil

    shutil.rmtree(Path(ctx.run_dir) / "datasets-cache", ignore_errors=True)  # local tasks' Arrow copies
    result["timings"]["total_s"] = time.perf_counter() - t_start
    result["complete"] = state is None
    ctx.write_result(result)
    progress(ctx, "done", 1.0, "evaluation stopped: the result holds what was scored" if state else "evaluation done")
    return state


if __name__ == "__main__":
    exit_process(run_job(main))
