"""Datasets from the Hugging Face Hub (``data.hub``): the repo's files from the standard cache, read locally.

The dataset repo is downloaded like a model (engine/tasks/hub_models.py with ``repo_type="dataset"``:
the same resumable downloader, progress events and messages); a fine-tune downloads it before it
starts, the checks before launch only ask the Hub whether it can be. Once cached, nothing here
touches the network.

Splits are found as ``datasets.load_dataset(folder)`` finds them: the ``configs`` of the README's
card (the default one, else the first), else the ``datasets`` package's file-name conventions (train,
validation, test in a file's or folder's name), else every data file is ``train``. ``data.split`` and
``data.val_split`` name a split or a data file's path in the repo; without ``val_split`` the repo's
validation split is used when there is one, else ``data.val_fraction`` of the training rows.

The tasks read files: a single CSV, TSV or JSONL file (text classification) or JSONL file (causal LM,
without ``data.columns``) is read where it is in the cache. Anything else (Parquet, JSON, a split of
several files, renamed columns) is written once as one JSONL file under ``<data>/hub-data/``, keyed by
the dataset's commit, files and column mapping; rows keep their order, so an issue's line is the row's
number in the split.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks.base import Issue

if TYPE_CHECKING:
    from engine.api.train_spec import TrainSpec

DATA_SUFFIXES = (".parquet", ".csv", ".tsv", ".jsonl", ".ndjson", ".json")
VAL_SPLITS = ("validation", "valid", "val", "dev")
READ_AS_IS = {"text_classification": (".csv", ".tsv", ".jsonl", ".ndjson"), "causal_lm": (".jsonl", ".ndjson")}
# The column names a causal LM row is guessed from, in order, when the dataset's differ from prompt/response.
PROMPT_NAMES = ("prompt", "question", "instruction", "input", "query", "text")
RESPONSE_NAMES = ("response", "answer", "output", "completion", "target")
MESSAGE_NAMES = ("messages", "conversations", "conversation", "chat")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "bot": "assistant", "model": "assistant"}


@dataclass
class HubFiles:
    """What a task reads of a Hub dataset: the training and validation files, and what was found."""

    folder: Path | None = None  # the cached snapshot; None while not downloaded
    splits: dict[str, list[str]] = field(default_factory=dict)  # split -> data files (paths in the repo)
    train: Path | None = None
    val: Path | None = None
    columns: list[str] = field(default_factory=list)  # of the training split
    issues: list[Issue] = field(default_factory=list)


def _front_matter(folder: Path) -> dict[str, Any]:
    readme = folder / "README.md"
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    if end < 0:
        return {}
    import yaml

    try:
        doc = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _glob(folder: Path, patterns: Any) -> list[str]:
    found: list[str] = []
    for pattern in [patterns] if isinstance(patterns, str) else list(patterns or []):
        for p in sorted(folder.glob(str(pattern))):
            if p.is_file() and p.relative_to(folder).as_posix() not in found:
                found.append(p.relative_to(folder).as_posix())
    return found


def _card_splits(folder: Path) -> dict[str, list[str]]:
    """The splits the dataset card's ``configs`` name (its default config, else the first)."""
    configs = _front_matter(folder).get("configs")
    if not isinstance(configs, list) or not configs:
        return {}
    dicts = [c for c in configs if isinstance(c, dict)]
    chosen = next((c for c in dicts if c.get("default") or c.get("config_name") == "default"), dicts[0] if dicts else {})
    files = chosen.get("data_files")
    if isinstance(files, (str, list)) and all(isinstance(f, str) for f in ([files] if isinstance(files, str) else files)):
        return {"train": _glob(folder, files)}
    splits: dict[str, list[str]] = {}
    for entry in files if isinstance(files, list) else []:
        if isinstance(entry, dict) and entry.get("split") and entry.get("path"):
            splits[str(entry["split"])] = _glob(folder, entry["path"])
    return splits


def splits_of(folder: Path) -> dict[str, list[str]]:
    """Split name -> its data files (paths in the repo), as ``datasets.load_dataset(folder)`` finds them."""
    splits = _card_splits(folder)
    if not splits:
        from datasets.data_files import DataFilesDict, get_data_patterns

        try:
            patterns = get_data_patterns(str(folder))
            resolved = DataFilesDict.from_patterns(patterns, base_path=str(folder))
        except Exception:  # noqa: BLE001 - EmptyDatasetError and friends: no data files by their rules
            resolved = {}
        splits = {name: [Path(os.path.relpath(f, folder)).as_posix() for f in files]
                  for name, files in resolved.items()}
    return {name: [f for f in files if f.lower().endswith(DATA_SUFFIXES)] or files
            for name, files in splits.items() if files}


def val_split_name(spec: TrainSpec, splits: dict[str, list[str]]) -> str | None:
    """data.val_split, else the dataset's validation split (None: val_fraction of the training rows)."""
    return spec.data.val_split or next((n for n in VAL_SPLITS if n in splits and n != spec.data.split), None)


def pick(choice: str, splits: dict[str, list[str]], folder: Path, repo_id: str, field_name: str) -> list[str] | Issue:
    """The files of split ``choice``, or the one data file ``choice`` names in the repo."""
    if choice in splits:
        files = splits[choice]
    elif (folder / choice).is_file():
        files = [choice]
    else:
        names = ", ".join(splits) or "none found"
        return Issue(f"{field_name}: the dataset {repo_id} has no split or file '{choice}' (splits: {names})",
                     f"set {field_name} to one of its splits, or to the path of a data file in the dataset")
    unreadable = [f for f in files if not f.lower().endswith(DATA_SUFFIXES)]
    if unreadable:
        return Issue(f"{field_name}: {repo_id}'s '{choice}' is in files Ember cannot read ({unreadable[0]})",
                     "pick a split or file in CSV, TSV, JSONL, JSON or Parquet")
    return files


# ---------------------------------------------------------------- rows


def records(folder: Path, files: list[str]) -> Iterator[dict[str, Any]]:
    """Every row of the files, in order, as a dict of column -> value."""
    for name in files:
        path = folder / name
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
                yield from batch.to_pylist()
        elif suffix in (".csv", ".tsv"):
            with open(path, encoding="utf-8-sig", newline="") as fh:
                yield from csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ",")
        else:
            yield from _json_records(path)


def _json_records(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None  # JSON lines
    if isinstance(doc, dict):  # {"data": [...]} or {"train": [...]}: the first list of rows in it
        doc = next((v for v in doc.values() if isinstance(v, list)), [doc])
    if isinstance(doc, list):
        yield from (r if isinstance(r, dict) else {"value": r} for r in doc)
        return
    for line in text.splitlines():
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = {"_unreadable": line[:200]}
            yield row if isinstance(row, dict) else {"value": row}


def columns_of(folder: Path, files: list[str]) -> list[str]:
    """The columns of the first rows (a Parquet file's schema)."""
    if files and files[0].lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        return list(pq.read_schema(folder / files[0]).names)
    seen: dict[str, None] = {}
    for i, row in enumerate(records(folder, files)):
        seen.update(dict.fromkeys(str(k) for k in row))
        if i >= 200:
            break
    return list(seen)


def chat_columns(spec: TrainSpec, columns: list[str], repo_id: str) -> tuple[dict[str, str], list[Issue]]:
    """field -> column for a causal LM row ({messages} or {prompt, response}), and what is missing."""
    mapping = dict(spec.data.columns)
    shown = ", ".join(columns) or "none"
    missing = [f"'{c}' (data.columns.{k})" for k, c in mapping.items() if c not in columns]
    if missing:
        return mapping, [Issue(f"data.columns: {repo_id} has no column {' or '.join(missing)} (columns: {shown})",
                               "name columns of the dataset in data.columns")]
    if not mapping and "messages" in columns:
        mapping["messages"] = "messages"
    if "messages" in mapping:
        return {"messages": mapping["messages"]}, []
    for key in ("prompt", "response"):
        if key not in mapping and key in columns:
            mapping[key] = key
    if "prompt" in mapping and "response" in mapping:
        return mapping, []
    guess_m = next((n for n in MESSAGE_NAMES if n in columns), None)
    guess = {k: mapping.get(k) or next((n for n in names if n in columns), None) or f"{k.upper()}_COLUMN"
             for k, names in (("prompt", PROMPT_NAMES), ("response", RESPONSE_NAMES))}
    example = f"{{messages: {guess_m}}}" if guess_m else f"{{prompt: {guess['prompt']}, response: {guess['response']}}}"
    return mapping, [Issue(f"data.columns: {repo_id} has no prompt and response columns, nor messages "
                           f"(columns: {shown})", f"map its columns in data.columns, e.g. {example}")]


def chat_row(row: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """A dataset row as the causal LM reads it: {"messages": [...]} or {"prompt", "response"}."""
    if "messages" in mapping:
        turns = row.get(mapping["messages"])
        if isinstance(turns, list):  # ShareGPT's {"from": "human", "value": ...} turns too
            turns = [{"role": SHAREGPT_ROLES.get(str(t.get("from")), t.get("from")), "content": t.get("value")}
                     if isinstance(t, dict) and "from" in t and "role" not in t else t for t in turns]
        return {"messages": turns}
    return {"prompt": row.get(mapping["prompt"]), "response": row.get(mapping["response"])}


# ---------------------------------------------------------------- files for the tasks


def _converted(spec: TrainSpec, folder: Path, files: list[str], mapping: dict[str, str] | None) -> Path:
    """One JSONL file of the split's rows (columns renamed for the causal LM), written once."""
    from engine.api.paths import data_home

    key = hashlib.sha256(json.dumps([folder.name, files, mapping], sort_keys=True).encode()).hexdigest()[:16]
    name = files[0].rsplit("/", 1)[-1].split(".")[0] if len(files) == 1 else f"{len(files)}-files"
    target = data_home() / "hub-data" / spec.data.hub.replace("/", "--") / f"{name}-{key}.jsonl"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for row in records(folder, files):
                out.write(json.dumps(chat_row(row, mapping) if mapping is not None else row, ensure_ascii=False,
                                     default=str) + "\n")
        os.replace(tmp, target)  # whole or not at all: several processes may convert at once
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _task_file(spec: TrainSpec, folder: Path, files: list[str], mapping: dict[str, str] | None) -> Path:
    as_is = READ_AS_IS.get(spec.task, ())
    if len(files) == 1 and files[0].lower().endswith(as_is) and not (mapping and set(mapping.items()) - {
            ("messages", "messages"), ("prompt", "prompt"), ("response", "response")}):
        return folder / files[0]
    return _converted(spec, folder, files, mapping)


def files_for(spec: TrainSpec) -> HubFiles:
    """The training and validation files of ``data.hub`` for the spec's task, from the cache.

    Not cached: no files, and an issue only when the Hub says it cannot be downloaded (offline, no
    such dataset, gated): the fine-tune downloads it as it starts."""
    from engine.tasks import hub_models

    d = spec.data
    repo_id = d.hub or ""
    found = HubFiles(folder=hub_models.cached_folder(repo_id, d.revision, "dataset"))
    if found.folder is None:
        found.issues = hub_models.probe_issues(repo_id, d.revision, "dataset")
        return found
    key = json.dumps([repo_id, found.folder.name, d.split, d.val_split, d.columns, spec.task], sort_keys=True)
    if key not in _READ:  # a check reads the files for the task and for the preview: once
        _READ[key] = _read(spec, found)
    return _READ[key]


_READ: dict[str, HubFiles] = {}


def _read(spec: TrainSpec, found: HubFiles) -> HubFiles:
    d, folder = spec.data, found.folder
    repo_id = d.hub or ""
    assert folder is not None
    found.splits = splits_of(folder)
    if not found.splits and not (folder / d.split).is_file():
        found.issues.append(Issue(f"data.hub: {repo_id} has no data files Ember can read (CSV, TSV, JSONL, JSON or "
                                  "Parquet)", "pick another dataset, or set data.split to the path of its data "
                                  "file"))
        return found
    train = pick(d.split, found.splits, folder, repo_id, "data.split")
    val_name = val_split_name(spec, found.splits)
    val = pick(val_name, found.splits, folder, repo_id, "data.val_split") if val_name else None
    found.issues += [x for x in (train, val) if isinstance(x, Issue)]
    if found.issues or not isinstance(train, list):
        return found
    try:
        found.columns = columns_of(folder, train)
        mapping = None
        if spec.task == "causal_lm":
            mapping, problems = chat_columns(spec, found.columns, repo_id)
            if problems:
                found.issues += problems
                return found
        found.train = _task_file(spec, folder, train, mapping)
        found.val = _task_file(spec, folder, val, mapping) if isinstance(val, list) else None
    except (OSError, ValueError, UnicodeDecodeError, csv.Error) as exc:
        found.issues.append(Issue(f"data.hub: {repo_id} could not be read ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:200] if str(exc) else ''})",
                                  "download it again (Download on the Data step, or "
                                  f"`ember models download --dataset {repo_id}`), or pick another split"))
    return found


def summary(spec: TrainSpec) -> dict[str, Any]:
    """What the wizard shows of ``data.hub``: cached or not, its splits and the training split's columns."""
    from engine.tasks import hub_models

    d = spec.data
    folder = hub_models.cached_folder(d.hub or "", d.revision, "dataset")
    out: dict[str, Any] = {"repo_id": d.hub, "revision": d.revision or "main", "cached": folder is not None,
                           "commit": None, "splits": {}, "split": d.split, "val_split": d.val_split, "columns": []}
    if folder is None:
        return out
    found = files_for(spec)
    out.update(commit=folder.name, splits={name: files for name, files in found.splits.items()},
               val_split=val_split_name(spec, found.splits), columns=found.columns)
    if spec.task == "causal_lm":
        out["column_guess"] = guess_chat_columns(found.columns)
    return out


def guess_chat_columns(columns: list[str]) -> dict[str, str]:
    """The likely column for each field of a causal LM row (offered by the form, never applied unasked)."""
    guess = {key: next((n for n in names if n in columns), None)
             for key, names in (("prompt", PROMPT_NAMES), ("response", RESPONSE_NAMES), ("messages", MESSAGE_NAMES))}
    if guess["messages"] and not (guess["prompt"] and guess["response"]):
        return {"messages": guess["messages"]}
    return {k: v for k, v in guess.items() if v and k != "messages"}
