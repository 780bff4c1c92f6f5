"""The wizard's spec as data: defaults, merging, validation by field, and the job file.

Everything here is plain dicts and pydantic (engine.api.train_spec imports nothing
else), so the form, the review YAML and what jobs.start receives are the same
document.
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any

import yaml
from pydantic import ValidationError

from engine.api.host_spec import LOCAL
from engine.api.job_terms import FINETUNE
from engine.api.train_spec import TrainSpec

KIND = FINETUNE
DEFAULTS: dict[str, Any] = TrainSpec().model_dump()

# The model validator reports cross-field problems without a location; these words say
# which field the sentence is about, so it can be shown next to that field.
_ROOT_FIELDS = (
    ("objective", "objective"),
    ("more than one process", "distributed.strategy"),
    ("nproc", "distributed.nproc"),
    ("qlora", "method.kind"),
    ("prompt tuning", "method.kind"),
    ("fp16", "precision"),
    ("max_steps", "max_steps"),
    ("data.packing", "data.packing"),
    ("group_by_length", "data.group_by_length"),
    ("optimizer_impl", "speed.optimizer_impl"),
)


def suggested_lr(task: str, method: str) -> float:
    """A learning rate that works for this task and method on the built-in data.

    Adapters and prompts start from scratch and want a large rate; a full fine-tune of a
    pretrained text model a small one (more would wreck what it knows); the image models
    start from random weights.
    """
    if method == "prompt_tuning":
        return 1e-2
    if method == "full":
        return 2e-3 if task == "image_classification" else 5e-5
    return 2e-3  # lora, qlora


# Welcome's "Tune and chat" start: the built-in SmolLM2 LoRA-tuned on the short-answers chat data, sized to
# take a few minutes on a laptop CPU (about 7 on 2 busy cores), with 30 held-out answers scored at each
# evaluation. Afterwards the Playground puts the tuned model beside the base.
FIRST_CHAT: dict[str, Any] = {
    "task": "causal_lm", "model": {"builtin": "smollm2-135m-instruct"},
    "data": {"builtin": "short-answers", "max_length": 48}, "method": {"kind": "lora"},
    "batch_size": 8, "max_steps": 40, "eval_every": 20, "checkpoint_every": 20,
    "optim": {"lr": 0.003, "warmup_steps": 4}, "generate_eval": {"prompts": 30, "max_new_tokens": 12},
}


def defaults_for(task: str) -> dict[str, Any]:
    spec = copy.deepcopy(DEFAULTS)
    spec["task"] = task
    spec["optim"]["lr"] = suggested_lr(task, spec["method"]["kind"])
    return spec


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` laid over it; nested dicts merge, everything else replaces."""
    out = copy.deepcopy(base)
    for key, value in (patch or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def diff_from_defaults(spec: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Only what differs from TrainSpec's defaults (nested), so the job file stays short."""
    defaults = DEFAULTS if defaults is None else defaults
    out: dict[str, Any] = {}
    for key, value in spec.items():
        default = defaults.get(key, object())
        if isinstance(value, dict) and isinstance(default, dict):
            sub = diff_from_defaults(value, default)
            if sub:
                out[key] = sub
        elif value != default:
            out[key] = value
    return out


def validate(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """(normalised spec, {}) when valid, else (None, {field path: [messages]})."""
    try:
        return TrainSpec.model_validate(spec).model_dump(), {}
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if path:
                errors.setdefault(path, []).append(message)
                continue
            for sentence in _sentences(message):
                field = next((f for word, f in _ROOT_FIELDS if word in sentence), "")
                errors.setdefault(field, []).append(sentence)
        return None, errors


def _sentences(message: str) -> list[str]:
    """The model validator's problems, joined with "; ", one each.

    A problem may itself say "…; use X instead": a part that starts with "use " belongs
    to the problem before it (and to that problem's field).
    """
    out: list[str] = []
    for part in message.split("; "):
        if out and part.startswith("use "):
            out[-1] += f"; {part}"
        else:
            out.append(part)
    return out


def launch_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as launched and shown: the task always, then whatever is not a default."""
    normal, _errors = validate(spec)
    diff = diff_from_defaults(normal if normal is not None else spec)
    return {"task": spec.get("task", DEFAULTS["task"]), **{k: v for k, v in diff.items() if k != "task"}}


def job_document(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": KIND, "name": name, "spec": launch_spec(spec)}


def job_yaml(name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump(job_document(name, spec), sort_keys=False, default_flow_style=False)


def file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "finetune"


def rdzv_endpoint(spec: dict[str, Any], addresses: dict[str, str] | None = None) -> str:
    """HOST:PORT of a multi-node run's rendezvous: rdzv_host, else node 0's address.

    ``addresses`` maps host names to their addresses (the Hosts page); without one, a
    remote node 0 is named by its host name, and a local one is 127.0.0.1 (the engine uses
    this machine's address as the hosts see it; a by-hand command needs it written in).
    """
    dist = spec.get("distributed") or {}
    node0 = str(((dist.get("nodes") or [{}])[0]).get("host") or LOCAL)
    host = dist.get("rdzv_host") or (addresses or {}).get(node0) or ("127.0.0.1" if node0 == LOCAL else node0)
    return f"{host}:{int(dist.get('rdzv_port') or DEFAULTS['distributed']['rdzv_port'])}"


def headless_commands(name: str, spec: dict[str, Any], addresses: dict[str, str] | None = None) -> str:
    """``ember run`` for the job file, and the torchrun line(s) that do the same by hand."""
    stem = file_stem(name)
    lines = [f"ember run {stem}.yaml"]
    dist = spec.get("distributed") or {}
    nodes = list(dist.get("nodes") or [])
    if nodes:
        endpoint = rdzv_endpoint(spec, addresses)
        lines.append("# the same run without the engine: one command per node, each on its host "
                     "(with the job file, data and model there):")
        for rank, node in enumerate(nodes):
            host = str(node.get("host") or LOCAL)
            where = "this machine" if host == LOCAL else f"host {host}"
            lines.append(f"# node {rank}" + (" (rank 0 / rendezvous)" if rank == 0 else "") + f": on {where}")
            lines.append(f"torchrun --nnodes {len(nodes)} --nproc-per-node {int(node.get('nproc') or 1)} "
                         f"--node-rank {rank} --rdzv-backend c10d --rdzv-endpoint {endpoint} --rdzv-id {stem} "
                         f"-m engine.recipes.finetune --config {stem}.yaml")
        return "\n".join(lines)
    slurm = dist.get("slurm") or None
    if slurm:
        cluster = str(slurm.get("cluster") or LOCAL)
        where = "this machine" if cluster == LOCAL else f"host {cluster}"
        lines.append(f"# submits it to Slurm from {where} (sbatch) and follows it; the batch script is kept as "
                     "node0/slurm.sbatch in the run folder, to submit again by hand")
        return "\n".join(lines)
    nproc = int(dist.get("nproc") or 1)
    if nproc > 1:
        lines.append(f"# the same run without the engine:\n"
                     f"torchrun --nproc-per-node {nproc} -m engine.recipes.finetune --config {stem}.yaml")
    return "\n".join(lines)


def default_run_name(task: str, method: str, stamp: str | None = None) -> str:
    short = {"text_classification": "text", "image_classification": "images", "causal_lm": "lm"}
    stamp = stamp or time.strftime("%m%d-%H%M")
    return f"{short.get(task, task)}-{method.replace('_', '-')}-{stamp}"


def route_issue(issue: dict[str, Any], spec: dict[str, Any]) -> str:
    """Which step an input issue belongs to: "model", "data" or "spec" (review)."""
    text = f"{issue.get('message', '')} {issue.get('hint', '')}".lower()
    where = str(issue.get("file") or "")
    model_path = str((spec.get("model") or {}).get("path") or "")
    data = spec.get("data") or {}
    data_paths = [str(p) for p in (data.get("path"), data.get("val_path")) if p]
    if where and model_path and where.startswith(model_path):
        return "model"
    if where and any(where.startswith(p) for p in data_paths):
        return "data"
    head = str(issue.get("message", "")).split(":", 1)[0]
    if head.startswith("model") or "model." in text or "model folder" in text:
        return "model"
    if head.startswith("data") or "data." in text or where:
        return "data"
    return "spec"


def issue_where(issue: dict[str, Any]) -> str:
    where = str(issue.get("file") or "")
    if where and issue.get("line"):
        where += f":{issue['line']}"
    return where


def issue_field(issue: dict[str, Any], fields: tuple[str, ...], default: str) -> str:
    """The spec field an input issue is about, from the field names its text mentions."""
    text = f"{issue.get('message', '')} {issue.get('hint', '')}"
    return next((f for f in fields if f in text), default)


def issue_line(issue: dict[str, Any]) -> str:
    """One line for under a field: "file.csv:3: message" (the file's name, not its path)."""
    where = str(issue.get("file") or "")
    if where:
        where = where.rstrip("/").rsplit("/", 1)[-1]
        if issue.get("line"):
            where += f":{issue['line']}"
    return f"{where}: {issue.get('message', '')}" if where else str(issue.get("message", ""))
