"""What every compression job does around its technique: load the parent, train briefly, evaluate, write.

``Job.open`` loads the parent run (``source.py``) and its data; ``train`` runs the
normal fine-tuning loop in this process on a given module (pruning recovery, QAT),
so its loss and metrics stream as the usual ``train``/``eval`` events; ``finish``
evaluates the variant next to the parent (``engine.evaluate.pair``) and writes
``model/ember_model.json``, ``evaluation.json`` and ``result.json``.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.api.specs import EvalSpec
from engine.api.variant_targets import TARGET_LABELS, variant_target
from engine.trainer import source as sources
from engine.training.context import JobContext, JobFailed

CALIBRATION_BATCH = 1  # one example per feed: the calibration count is a count of examples

# A recovery fine-tune scores the validation set at most four times and at most every this many steps (always at
# its last step): with fake quantization on, one evaluation costs as much as a dozen training steps, and a
# short recovery evaluated at every step spent most of its time there.
MIN_EVAL_EVERY = 10


@dataclass
class Job:
    ctx: JobContext
    spec: Any  # a CompressSpec
    source: sources.Source
    data: Any
    parent: Any  # the parent's torch module (fp32, CPU, eval)
    work: Path
    files: dict[str, Path] = field(default_factory=dict)
    fused: dict[str, tuple[Path | None, dict[str, Any]]] = field(default_factory=dict)  # optimized(), by name
    _baseline: tuple[Any, Any] | None = None

    @classmethod
    def open(cls, ctx: JobContext, spec: Any) -> Job:
        source = sources.open_source(Path(ctx.run_dir).resolve().parent / spec.source_run)
        if spec.eval.runtime == "onnxruntime-cuda":
            if not cuda_available():
                raise JobFailed("eval.runtime onnxruntime-cuda needs ONNX Runtime's CUDA provider, which is not "
                                "available here", "Use eval.runtime auto or onnxruntime-cpu.")
        import torch

        torch.manual_seed(source.spec.seed)
        progress(ctx, "load", 0.02, f"loading run {source.job_id} ({source.spec.task}, {source.spec.model_name()})")
        data = sources.load_data(source)
        parent = sources.load_model(source, data)
        work = Path(ctx.run_dir) / "work"
        work.mkdir(exist_ok=True)
        return cls(ctx, spec, source, data, parent, work)

    @property
    def task_name(self) -> str:
        return self.source.spec.task

    @property
    def model_dir(self) -> Path:
        out = Path(self.ctx.run_dir) / "model"
        out.mkdir(exist_ok=True)
        return out

    def example_batch(self, n: int = 4, split: str = "val") -> dict[str, Any]:
        rows = self.data.val if split == "val" else self.data.train
        if len(rows) == 0:
            raise JobFailed(f"Run {self.source.job_id} has no {split} examples",
                            "Fine-tune with a validation split (data.val_fraction or data.val_path).")
        return self.data.collate([rows[i] for i in range(min(n, len(rows)))])

    def calibration_feeds(self, input_names: list[str], samples: int) -> list[dict[str, Any]]:
        """``samples`` training examples (never the held-out ones the variant is scored on)."""
        from engine.compress.onnx_export import feeds

        rows = self.data.train
        n = min(samples, len(rows))
        self.ctx.log(f"calibrating on {n} training examples")
        return [feeds(input_names, self.data.collate([rows[i]])) for i in range(n)]

    def calibration_batches(self, samples: int) -> list[dict[str, Any]]:
        """The same examples as ``calibration_feeds``, as the torch model's keyword inputs."""
        from engine.evaluate.runners import TASK_INPUTS

        rows = self.data.train
        keys = TASK_INPUTS[self.task_name]
        return [{k: v for k, v in self.data.collate([rows[i]]).items() if k in keys}
                for i in range(min(samples, len(rows)))]

    def export(self, model: Any, name: str) -> dict[str, Any]:
        from engine.compress.onnx_export import export_onnx

        path = self.work / name if name != "model.onnx" else self.model_dir / name
        report = export_onnx(model, self.task_name, self.example_batch(), path)
        self.files[name] = path
        return report

    def optimized(self, model: Any, name: str, attention: str) -> tuple[Path | None, dict[str, Any]]:
        """``model`` exported and run through ONNX Runtime's transformer optimizer (engine/compress/graph_opt.py):
        the fused file (None when nothing could be fused) and the optimizer's report."""
        from engine.compress import graph_opt

        key = f"{name}-{attention}"
        if key not in self.fused:
            dst = self.work / f"{key}.fused.onnx"
            report = graph_opt.export_fused(model, self.task_name, self.example_batch(), dst, attention=attention)
            if report["path"]:
                self.ctx.log("graph optimized: " + ", ".join(f"{n} {op}" for op, n in report["fused"].items())
                             + f" ({report['nodes_before']} -> {report['nodes_after']} nodes, max abs diff "
                             f"{report['max_abs_diff']:.2g})" + (f"; {report['attention_note']}"
                                                                 if report.get("attention_note") else ""))
            else:
                self.ctx.log(f"graph not optimized: {report['skipped']}")
            self.fused[key] = (Path(report["path"]) if report["path"] else None, report)
        return self.fused[key]

    def baseline(self) -> tuple[sources.Source, Any]:
        """What the variant is scored beside: the parent, or ``spec.baseline_run`` (a chain's start)."""
        run = getattr(self.spec, "baseline_run", None)
        if not run or run == self.source.job_id:
            return self.source, self.parent
        if self._baseline is None:
            source = sources.open_source(Path(self.ctx.run_dir).resolve().parent / run)
            progress(self.ctx, "load", 0.82, f"loading run {run} to score the variant beside it")
            self._baseline = (source, sources.load_model(source, self.data))
        return self._baseline

    def parent_onnx(self) -> Path:
        if "parent.onnx" not in self.files:
            progress(self.ctx, "export", 0.1, "exporting the parent to ONNX (fp32)")
            self.export(self.parent, "parent.onnx")
        return self.files["parent.onnx"]

    def train(self, model: Any, steps: int, lr: float, batch_size: int, what: str, teacher_alpha: float = 0.0) -> Any:
        """Fine-tune ``model`` in full for ``steps`` with the normal loop; None when the user stopped it.

        ``teacher_alpha`` > 0: the loss also pulls towards the fp32 parent's soft labels with that weight
        (QAT: the quantized model learns to give what the float one gave, not only the labels it fits already).
        """
        from engine.trainer.loop import Trainer
        from engine.training import dist
        from engine.training.checkpoint import unwrap

        s = self.source.spec
        spec = s.model_copy(update={
            "method": type(s.method)(kind="full"), "max_steps": steps, "epochs": None, "batch_size": batch_size,
            "optim": s.optim.model_copy(update={"lr": lr, "warmup_steps": 0}), "resume": False,
            "eval_every": max(steps // 4, MIN_EVAL_EVERY), "early_stopping": None, "grad_accum": 1, "precision": "fp32",
            "distributed": type(s.distributed)(), "device": "auto", "distill": None})
        teacher = None
        if teacher_alpha > 0:
            from engine.api.train_spec import DistillSpec

            spec = spec.model_copy(update={"distill": DistillSpec(teacher_run=self.source.job_id, student_layers=None,
                                                                  alpha=teacher_alpha)})
            teacher = copy.deepcopy(self.parent)
        self.ctx.log(f"{what}: {steps} steps at lr {lr:g}, batch {batch_size}"
                     + (f", {teacher_alpha:g} of the loss from the parent's soft labels" if teacher else ""))
        world = dist.init(spec.device)
        trainer = Trainer(spec, world, self.ctx, Path(self.ctx.run_dir), initial_model=model,
                          save_model=False, checkpoints=False, teacher=teacher)
        if trainer.run() != "succeeded":
            return None
        return unwrap(trainer.model).cpu().float().eval()

    def finish(self, label: str, technique: str, variant_onnx: Path | None, variant_torch: Any,
               settings: dict[str, Any], extra: dict[str, Any],
               meta_extra: dict[str, Any] | None = None, write_meta: bool = True) -> dict[str, Any]:
        """Evaluate the variant beside the parent, write its metadata and result; returns the result."""
        from engine.evaluate import pair

        progress(self.ctx, "evaluate", 0.85, "evaluating the variant beside its parent")
        fmt = "onnx" if variant_torch is None else "torch"
        meta = sources.variant_meta(self.source, technique, fmt, **settings)
        meta.update(meta_extra or {})
        if write_meta:
            (self.model_dir / "ember_model.json").write_text(json.dumps(meta, indent=1, default=str),
                                                             encoding="utf-8")
        doc = self.evaluate(label, variant_onnx, variant_torch)
        doc["target"] = target_of(technique, settings, doc["settings"]["runtime"])
        if not doc["target"]["measured_on_target"]:
            self.ctx.log(f"latency: {doc['target']['note']}")
        pair.write(Path(self.ctx.run_dir), doc)
        result = {"source_run": self.source.job_id, "technique": technique, "label": label,
                  "path": str(self.model_dir), "evaluation": summary(doc), **extra}
        self.ctx.write_result(result)
        self.ctx.emit("artifact", type="model", path=str(self.model_dir), source_run=self.source.job_id,
                      format=fmt)
        self.ctx.emit("artifact", type="evaluation", path=str(Path(self.ctx.run_dir) / "evaluation.json"))
        self.ctx.emit("result", **result)
        progress(self.ctx, "done", 1.0, _headline(doc))
        shutil.rmtree(self.work, ignore_errors=True)
        return result


    def evaluate(self, label: str, variant_onnx: Path | None, variant_torch: Any) -> dict[str, Any]:
        """evaluation.json: parent and variant in one runtime, with the same threads and inputs."""
        from engine.evaluate import facts, peak_memory, runners
        from engine.evaluate.pair import Candidate, EvalSettings, evaluate_pair

        e = self.spec.eval
        runtime = e.runtime
        if runtime == "auto":
            runtime = "onnxruntime-cuda" if cuda_available() else "onnxruntime-cpu"
        threads = runners.resolve_threads(e.threads)
        one = self.example_batch(1)
        base_source, base = self.baseline()
        parent_facts = facts.torch_facts(base, one, self.task_name)
        # Quantization changes the bits per parameter, not their number or the work per example.
        variant_facts = facts.torch_facts(self.parent if variant_torch is None else variant_torch, one, self.task_name)
        if runtime == "torch":
            if variant_torch is None:
                raise JobFailed("eval.runtime torch cannot run an ONNX variant",
                                "Use eval.runtime auto or onnxruntime-cpu.")
            parent_runner = runners.TorchRunner(base, self.task_name, threads, label="parent")
            variant_runner = runners.TorchRunner(variant_torch, self.task_name, threads, label=label)
            parent_file = peak_memory.save_module(base, self.work / "parent.pt")
            variant_file = peak_memory.save_module(variant_torch, self.work / "variant.pt")
            parent_size, variant_size = base_source.weights_file(), self.model_dir
        else:
            provider = "cuda" if runtime.endswith("cuda") else "cpu"
            parent_file = self.parent_onnx() if base is self.parent else self.export(base, "baseline.onnx")["path"]
            variant_file = variant_onnx or self.export(variant_torch, "model.onnx")["path"]
            parent_runner = runners.OrtRunner(parent_file, self.task_name, threads, provider, label="parent")
            variant_runner = runners.OrtRunner(variant_file, self.task_name, threads, provider, label=label)
            parent_size, variant_size = parent_file, variant_file
        parent = Candidate(base_source.job_id, "parent", parent_runner, parent_size, parent_facts["params"],
                           parent_facts["macs"], parent_file)
        variant = Candidate(Path(self.ctx.run_dir).name, label, variant_runner, variant_size,
                            variant_facts["params"], variant_facts["macs"], variant_file)
        settings = EvalSettings(samples=e.samples, batch_size=e.batch_size, warmup=e.warmup, repeats=e.repeats,
                                threads=threads, runtime=runtime)
        return evaluate_pair(parent, variant, self.data, self.task_name, settings, log=self.ctx.log)


def target_of(technique: str, settings: dict[str, Any], measured_with: str) -> dict[str, Any]:
    """``{"runtime", "label", "measured_on_target", "note"}`` for a variant measured with ``measured_with``."""
    target = variant_target(technique, settings.get("target"))
    on_target = target in ("cpu", "any") or (target == "gpu" and measured_with == "onnxruntime-cuda")
    note = "" if on_target else (
        f"not its target runtime: measured with {measured_with}, its target is {TARGET_LABELS[target]}; "
        "its figures there come from an export to TensorRT or a Jetson (Export), not from this job")
    return {"runtime": target, "label": TARGET_LABELS[target], "measured_on_target": on_target, "note": note}


def cuda_available() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def progress(ctx: JobContext, stage: str, fraction: float, message: str) -> None:
    ctx.emit("progress", stage=stage, fraction=round(fraction, 3), message=message)
    ctx.log(message)


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The few figures a job record carries; the whole document is evaluation.json."""
    def entry(e: dict[str, Any]) -> dict[str, Any]:
        m = e.get("metrics") or {}
        lat = e.get("latency_ms") or {}
        return {"accuracy": m.get("accuracy"), "perplexity": m.get("perplexity"),
                "p50_b1_ms": (lat.get("b1") or {}).get("p50"), "p50_bN_ms": (lat.get("bN") or {}).get("p50"),
                "size_bytes": e.get("size_bytes"), "params": e.get("params")}
    return {"parent": entry(doc["parent"]), "variant": entry(doc["variant"]), "agreement": doc.get("agreement"),
            "delta": doc.get("delta"), "runtime": doc["settings"].get("runtime"), "target": doc.get("target")}


def _headline(doc: dict[str, Any]) -> str:
    d = doc.get("delta") or {}
    parts = [f"{k} {v:+.4f}" if k == "accuracy" else f"{k} {v:.3f}" for k, v in d.items()
             if isinstance(v, (int, float))]
    return "evaluated: " + ", ".join(parts)


def evaluate_student(ctx: JobContext, run_dir: Path, spec: Any) -> dict[str, Any]:
    """After a distillation fine-tune: score the student (this run) beside its teacher."""
    d = spec.distill
    teacher = sources.open_source(Path(run_dir).resolve().parent / d.teacher_run)
    import torch

    torch.manual_seed(teacher.spec.seed)
    data = sources.load_data(teacher)
    job = Job(ctx, _StudentEval(d.teacher_run), teacher, data, sources.load_model(teacher, data),
              Path(run_dir) / "work")
    job.work.mkdir(exist_ok=True)
    student_src = sources.open_source(Path(run_dir))
    student = sources.load_model(student_src, data)
    layers = (student_src.meta.get("student") or {}).get("layers")
    label = f"student {layers} layers" if layers else f"student {spec.model_name()}"
    settings = {"teacher_run": d.teacher_run, "student_layers": d.student_layers, "temperature": d.temperature,
                "alpha": d.alpha}
    return job.finish(label, "distill", None, student, settings, {"student": student_src.meta.get("student")},
                      write_meta=False)


@dataclass
class _StudentEval:
    """What Job needs of a compression spec, for a student scored with the default settings."""

    source_run: str
    eval: EvalSpec = field(default_factory=EvalSpec)
