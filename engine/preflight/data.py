"""What the wizard shows of a dataset before launch: rows or thumbnails, class balance, issues.

Runs in the check subprocess (``data.inspect``). It reads the files the same way the
task modules do when training, so what the preview flags is what training would flag;
every issue names the spec field it belongs to, for the form to show it in place.
"""

from __future__ import annotations

import base64
import io
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.api import prepared_models
from engine.api.train_spec import TrainSpec

THUMB_PX = 64
CELL_CHARS = 300  # a preview cell; the full text stays in the file
EXAMPLE_CHARS = 4000  # the rendered example row; a longer one is cut


def _issue(issue: Any, field: str) -> dict[str, Any]:
    return {**asdict(issue), "field": field}


def _named(issue: Any, default: str) -> str:
    """The data field an issue names first ("data.split: ..."), else ``default``."""
    head = issue.message.split(":", 1)[0]
    return head if head.startswith("data.") and " " not in head else default


def _field_of(issue: Any, spec: TrainSpec) -> str:
    if spec.data.hub:  # the rows of a Hub dataset: under its id, or the field the issue names
        return _named(issue, "data.hub")
    val = spec.data.val_path
    if val and issue.file and Path(issue.file).expanduser() == Path(val).expanduser():
        return "data.val_path"
    return "data.path"


def _split_sizes(n: int, fraction: float) -> tuple[int, int]:
    n_val = min(max(round(n * fraction), 1 if n >= 2 else 0), max(n - 1, 0))
    return n - n_val, n_val


def _text(spec: TrainSpec, n: int) -> dict[str, Any]:
    from engine.tasks import text_classification as tc
    from engine.tasks.text_files import column_profile, guess_columns

    src = tc.sources(spec)
    # An issue with a file is the dataset's (an archive that cannot be unpacked); else a built-in name's.
    issues = [_issue(i, _named(i, _field_of(i, spec) if i.file else "data.builtin" if "dataset" in i.message
                               else "model")) for i in src.issues]
    # The file's own columns, so the form offers them (and a guess) instead of a free-text name.
    profile = column_profile(src.train) if src.train and (spec.data.path or spec.data.hub) else []
    found_columns = {"file_columns": profile, "column_guess": guess_columns(profile), **_hub(spec)}
    if not src.train:
        return {"kind": "table", "columns": [], "rows": [], "class_counts": {}, "n_train": 0, "n_val": 0,
                "issues": issues, **found_columns}
    train = tc.read_rows(src.train, src.text_column, src.label_column, "data.path")
    val = tc.read_rows(src.val, src.text_column, src.label_column, "data.val_path") if src.val else None
    found = train.issues + (val.issues if val else [])
    if train.texts:
        found += tc.label_issues(spec, train, val)
    issues += [_issue(i, _field_of(i, spec)) for i in found]
    # One rule for every dataset: the class counts are the training split's, as training will see it.
    if val is not None:
        train_labels, n_val = train.labels, len(val.texts)
    else:
        train_idx, val_idx = tc.split(train.labels, spec.data.val_fraction, spec.seed)
        train_labels, n_val = [train.labels[i] for i in train_idx], len(val_idx)
    rows = [{"line": str(line), src.text_column: text[:CELL_CHARS], src.label_column: label}
            for line, text, label in zip(train.lines[:n], train.texts[:n], train.labels[:n], strict=True)]
    return {"kind": "table", "columns": ["line", src.text_column, src.label_column], "rows": rows,
            "class_counts": dict(sorted(Counter(train_labels).items())), "n_train": len(train_labels),
            "n_val": n_val, "issues": issues, **found_columns}


def _thumbnail(path: Path) -> str:
    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        img.thumbnail((THUMB_PX, THUMB_PX))
        if img.width < THUMB_PX // 2:  # tiny scans (8x8 digits) are shown enlarged, pixels kept sharp
            scale = THUMB_PX // max(img.width, img.height)
            img = img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST)
        out = io.BytesIO()
        img.save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def _images(spec: TrainSpec, n: int) -> dict[str, Any]:
    from engine.tasks import image_classification as ic

    train, val, found = ic.check_data(spec)
    issues = [_issue(i, _field_of(i, spec)) for i in found]
    if val is not None:
        split_train, split_val = train, val
    else:
        split_train, split_val = ic.split_classes(train, spec.data.val_fraction, spec.seed) if train else ({}, {})
    # The training split's counts, as for text: what training will see.
    counts = {name: len(files) for name, files in sorted(split_train.items())}
    n_train, n_val = sum(counts.values()), sum(len(f) for f in split_val.values())
    thumbs: list[dict[str, str]] = []
    # Round-robin over classes so the grid shows every class, not n of the first.
    queues = {name: list(files[:n]) for name, files in sorted(train.items())}
    while len(thumbs) < n and any(queues.values()):
        for name, files in queues.items():
            if files and len(thumbs) < n:
                path = files.pop(0)
                try:
                    thumbs.append({"label": name, "png_base64": _thumbnail(path), "file": str(path)})
                except OSError:
                    pass  # already listed as unreadable by the folder check
    return {"kind": "images", "columns": [], "rows": [], "thumbnails": thumbs, "class_counts": counts,
            "n_train": n_train, "n_val": n_val, "issues": issues}


def _chat(spec: TrainSpec, n: int) -> dict[str, Any]:
    from engine.tasks import causal_lm as lm

    train_path, val_path, found = lm.resolve_data_files(spec)
    issues = [_issue(i, _named(i, "data.builtin")) for i in found]
    rows: list = []
    n_val = 0
    if train_path is not None:
        rows, bad = lm.read_rows(train_path)
        issues += [_issue(i, "data.hub" if spec.data.hub else "data.path") for i in bad]
        if val_path is not None:
            val_rows, val_bad = lm.read_rows(val_path)
            issues += [_issue(i, "data.hub" if spec.data.hub else "data.val_path") for i in val_bad]
            n_val = len(val_rows)
    n_train = len(rows)
    if val_path is None:
        n_train, n_val = _split_sizes(len(rows), spec.data.val_fraction)
    shown = []
    for line, messages in rows[:n]:
        prompt = " ".join(m["content"] for m in messages if m.get("role") != "assistant")
        response = " ".join(m["content"] for m in messages if m.get("role") == "assistant")
        shown.append({"line": str(line), "prompt": prompt[:CELL_CHARS], "response": response[:CELL_CHARS]})
    return {"kind": "chat", "columns": ["line", "prompt", "response"], "rows": shown, "class_counts": {},
            "n_train": n_train, "n_val": n_val, "issues": issues, **template_example(spec, rows), **_hub(spec)}


def _hub(spec: TrainSpec) -> dict[str, Any]:
    """``hub``: a Hub dataset's state for the form (cached, splits, columns); nothing for other data."""
    if not spec.data.hub:
        return {}
    from engine.tasks import hub_data

    return {"hub": hub_data.summary(spec)}


def _ready_model_folder(spec: TrainSpec) -> Path | None:
    """The causal LM's folder when it is at hand: nothing is downloaded or converted for a preview."""
    from engine.tasks import causal_lm as lm
    from engine.tasks import hub_models

    m = spec.model
    if m.hub:
        return hub_models.cached_folder(m.hub, m.revision)
    if m.path and not m.builtin:
        folder = Path(m.path).expanduser()
    else:  # a built-in model is written by its first use (the wizard's checks, a fine-tune), not by a preview
        folder = prepared_models.folder(m.builtin or lm.BUILTIN_MODEL)
    return folder if (folder / "config.json").is_file() else None


def _render_first(folder: Path, chosen: str, first: tuple[int, list] | None) -> tuple[Any, Any]:
    """(the template's holder, the first row's (text, learned spans) or None): from the folder's files, which
    is fast; with the real tokenizer when they do not render (it imports torch: seconds)."""
    from engine.tasks import causal_lm as lm
    from engine.tasks.template_preview import FolderTemplate

    try:
        holder: Any = FolderTemplate(folder, chosen)
        return holder, lm.render(holder, first[1]) if first else None
    except Exception:  # noqa: BLE001 - an unusual folder or template: the tokenizer itself decides
        holder = lm.load_tokenizer(folder, chosen)
        return holder, lm.render(holder, first[1]) if first else None


def template_example(spec: TrainSpec, rows: list) -> dict[str, Any]:
    """Whether the model has a chat template of its own, the template a fine-tune renders with, and the
    first row of the training file as the model will read it, with the learned characters as spans.

    ``model_chat_template`` is None and ``rendered_example`` too while the model is not at hand (a Hub
    model not downloaded yet, a built-in one not prepared yet); ``example_error`` says why a row cannot
    be rendered."""
    from engine.tasks import chat_templates
    from engine.tasks.base import InputError

    chosen = spec.data.chat_template
    answer: dict[str, Any] = {"model_chat_template": None, "chat_template": chosen,
                              "chat_template_used": chosen if chosen != "auto" else None,
                              "rendered_example": None, "example_error": None}
    folder = _ready_model_folder(spec)
    if folder is None:
        return answer
    first = rows[0] if rows else None
    try:
        tokenizer, rendered = _render_first(folder, chosen, first)
    except InputError as exc:
        answer["example_error"] = str(exc)
        return answer
    except Exception as exc:  # noqa: BLE001 - a chat template may raise anything (jinja, its own checks)
        answer["example_error"] = f"the chat template rejected line {first[0] if first else '?'} ({exc})"
        return answer
    answer["model_chat_template"] = tokenizer.model_has_chat_template
    answer["chat_template_used"] = chat_templates.used_name(tokenizer.model_has_chat_template, chosen)
    if first is None or rendered is None:
        return answer
    line, (text, spans) = first[0], rendered
    cut = text[:EXAMPLE_CHARS]
    learned = [[a, min(b, len(cut))] for a, b in spans if a < len(cut)]
    answer["rendered_example"] = {"line": line, "text": cut, "learned": learned, "cut": len(text) > len(cut)}
    return answer


def _preferences(spec: TrainSpec, n: int) -> dict[str, Any]:
    """Objective dpo, orpo or kto: the preference rows as the preference task reads them."""
    from engine.tasks import preference_data as pdata

    train_path, val_path, found = pdata.resolve_files(spec)
    issues = [_issue(i, "data.builtin") for i in found]
    rows: list = []
    n_val = 0
    if train_path is not None:
        rows, bad = pdata.read(train_path, spec.objective)
        issues += [_issue(i, "data.path") for i in bad]
        if val_path is not None:
            val_rows, val_bad = pdata.read(val_path, spec.objective)
            issues += [_issue(i, "data.val_path") for i in val_bad]
            n_val = len(val_rows)
    n_train = len(rows)
    if val_path is None:
        n_train, n_val = _split_sizes(len(rows), spec.data.val_fraction)
    answers = ("completion", "label") if spec.objective == "kto" else ("chosen", "rejected")
    if spec.objective == "kto" and rows:  # a pair is two kto rows: count what training will see
        unpaired = pdata.unpair(rows)
        n_train, n_val = (round(k * len(unpaired) / len(rows)) for k in (n_train, n_val))
        rows = unpaired

    def text(value: Any) -> str:
        return " ".join(m["content"] for m in value) if isinstance(value, list) else str(value).lower()

    shown = [{"line": str(line), "prompt": text(row["prompt"])[:CELL_CHARS],
              **{k: text(row[k])[:CELL_CHARS] for k in answers}} for line, row in rows[:n]]
    return {"kind": "chat", "columns": ["line", "prompt", *answers], "rows": shown, "class_counts": {},
            "n_train": n_train, "n_val": n_val, "issues": issues}


def inspect_data(spec: TrainSpec, n: int = 12) -> dict[str, Any]:
    reader = {"text_classification": _text, "image_classification": _images, "causal_lm": _chat}[spec.task]
    if spec.objective != "sft":
        reader = _preferences
    answer = reader(spec, n)
    answer.setdefault("thumbnails", [])
    return answer
