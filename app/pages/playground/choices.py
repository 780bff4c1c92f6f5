"""What the Playground can try, as plain data: the models a picker lists and the ModelRef each stands for.

A choice is a finished fine-tune or compression variant of a language model or classifier (from the window's JobsState), a
built-in chat model, a model in the Hugging Face cache (``models.list``) or a folder the user browsed to.
Its ``ref`` is a ModelRef (engine/api/playground.py) as a dict, what ``playground.chat`` and
``playground.predict`` take; ``kind`` says whether the model chats or classifies, and ``base`` is the model
a fine-tune started from, which side by side puts beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from app.models.jobs import parent_id, run_summary, run_title
from app.state.navigation import PLAYGROUND_TASKS, playground_can_open
from engine.api.job_terms import FINETUNE
from engine.api.playground import ModelRef
from engine.api.train_spec import BUILTIN_MODEL_CHOICES, BUILTIN_MODELS

CHAT, CLASSIFY = "chat", "classify"
# What the Playground does with each task it takes: chat with a language model, classify a text or an image.
TASK_KINDS = {"causal_lm": CHAT, "text_classification": CLASSIFY, "image_classification": CLASSIFY}
assert set(TASK_KINDS) == set(PLAYGROUND_TASKS)
FINETUNES, VARIANTS, BUILTINS, HUB, FOLDERS, ENDPOINTS = (
    "Fine-tunes", "Compressed variants", "Built-in", "Hugging Face cache", "Folders", "Served endpoints")
GROUPS = (FINETUNES, VARIANTS, BUILTINS, HUB, FOLDERS, ENDPOINTS)  # the picker's order

Lookup = Callable[[str], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Choice:
    ref: dict[str, Any]  # a ModelRef as a dict: {"run": id} | {"builtin": name} | {"hub": id, "revision"?} | {"path"}
    title: str  # what the picker shows
    group: str  # one of GROUPS
    kind: str = CHAT  # CHAT or CLASSIFY
    base: dict[str, Any] | None = None  # the model a fine-tune started from (a chat model's ref), if known
    detail: str = ""  # the picker's tooltip: task, model, method
    task: str = ""  # a run's task (image_classification: the classifier takes an image file)

    @property
    def key(self) -> str:
        return ref_key(self.ref)


def ref_key(ref: dict[str, Any] | None) -> str:
    """One string per model, so two refs to the same model compare equal (the engine's worker key)."""
    return ModelRef.model_validate(ref).key() if ref else ""


def ref_label(ref: dict[str, Any] | None) -> str:
    """A short name for a ref: the run id, built-in name, Hub id or folder name."""
    if not ref:
        return ""
    if ref.get("path"):
        return PurePath(str(ref["path"]).rstrip("/\\")).name or str(ref["path"])
    if ref.get("url"):
        return str(ref["url"]).split("://", 1)[-1].removesuffix("/v1").rstrip("/")
    return str(ref.get("run") or ref.get("builtin") or ref.get("hub") or "")


def can_try(job: dict[str, Any], lookup: Lookup | None = None) -> bool:
    """A finished fine-tune or variant of a language model or classifier: something the Playground opens."""
    return playground_can_open(job, run_summary(job, lookup).get("task"))


def finetune_of(job: dict[str, Any], lookup: Lookup | None) -> dict[str, Any] | None:
    """The fine-tune a job comes from (itself for a fine-tune), following parents up."""
    seen: set[str] = set()
    current: dict[str, Any] | None = job
    while current is not None and current.get("id") not in seen:
        if current.get("kind") == FINETUNE:
            return current
        seen.add(str(current.get("id")))
        parent = parent_id(current)
        current = lookup(parent) if parent and lookup else None
    return None


def base_ref(job: dict[str, Any], lookup: Lookup | None = None) -> dict[str, Any] | None:
    """The chat model a language-model run was tuned from (its fine-tune's spec.model), or None."""
    root = finetune_of(job, lookup)
    spec = (root or {}).get("spec") if isinstance((root or {}).get("spec"), dict) else {}
    if not spec or spec.get("task") != "causal_lm":
        return None
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    if model.get("code"):
        return None  # the user's own model code: nothing the Playground can load by name
    if model.get("hub"):
        return {"hub": model["hub"], **({"revision": model["revision"]} if model.get("revision") else {})}
    if model.get("path"):
        return {"path": model["path"]}
    return {"builtin": model.get("builtin") or BUILTIN_MODELS["causal_lm"]}


def job_choice(job: dict[str, Any], lookup: Lookup | None = None) -> Choice | None:
    if not can_try(job, lookup):
        return None
    info = run_summary(job, lookup)
    kind = TASK_KINDS[str(info.get("task"))]
    group = FINETUNES if job.get("kind") == FINETUNE else VARIANTS
    what = ", ".join(str(info[k]) for k in ("model", "method") if info.get(k))
    title = run_title(job, lookup) + (f" ({what})" if what else "")
    detail = f"{job['id']}: {str(info.get('task')).replace('_', ' ')}" + (f", {what}" if what else "")
    return Choice({"run": str(job["id"])}, title, group, kind, base_ref(job, lookup), detail, str(info.get("task")))


def job_choices(jobs: Iterable[dict[str, Any]], lookup: Lookup | None = None) -> list[Choice]:
    """The finished fine-tunes, then the finished variants, of language models and classifiers (newest first, as given)."""
    found = [c for c in (job_choice(job, lookup) for job in jobs) if c is not None]
    return [c for c in found if c.group == FINETUNES] + [c for c in found if c.group == VARIANTS]


def builtin_choices() -> list[Choice]:
    return [Choice({"builtin": name}, name, BUILTINS, CHAT, detail="a built-in language model")
            for name in BUILTIN_MODEL_CHOICES["causal_lm"]]


def hub_choices(reply: dict[str, Any]) -> list[Choice]:
    """The models of a ``models.list`` reply that have a complete revision; main when it has one."""
    out = []
    for model in reply.get("models") or []:
        revisions = [r for r in model.get("revisions") or [] if r.get("commit")]
        if not model.get("repo_id") or not revisions:
            continue  # only a partial download: nothing to load yet
        ref: dict[str, Any] = {"hub": model["repo_id"]}
        if not any("main" in (r.get("refs") or []) for r in revisions):
            ref["revision"] = revisions[0]["commit"]
        out.append(Choice(ref, model["repo_id"], HUB, CHAT, detail=f"{model['repo_id']} from the Hugging Face cache"))
    return out


def folder_choice(path: str) -> Choice:
    """A model folder, an ONNX-GenAI folder or a GGUF file picked with Browse (the engine opens each in its runtime)."""
    ref = {"path": path}
    what = "GGUF, llama.cpp" if path.endswith(".gguf") else "folder"
    return Choice(ref, f"{ref_label(ref)} ({what})", FOLDERS, CHAT, detail=path)


def endpoint_choice(url: str, key_file: str = "", key: str = "") -> Choice:
    """An OpenAI-compatible server's URL (Ember's serve job, vLLM, llama.cpp's server): the engine chats with
    the model it serves. Its key as a file the engine reads (an engine on this machine), or as the key itself
    (a team engine reads no file a client names; the key is never kept in saved chats)."""
    ref: dict[str, Any] = {"url": url.strip()}
    if key:
        ref["api_key"] = key
    elif key_file:
        ref["api_key_file"] = key_file
    return Choice(ref, f"{ref_label(ref)} (endpoint)", ENDPOINTS, CHAT,
                  detail=f"{ref['url']}" + (" with an API key" if key or key_file else ""))
