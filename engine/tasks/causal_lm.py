"""Causal LM: supervised fine-tuning of a Hugging Face model folder on prompt/response data.

Model: ``model.path`` is a folder saved by ``save_pretrained`` (config.json, weights,
tokenizer files: Llama, Qwen, GPT-2, ...), loaded with ``local_files_only``. The
built-in ``smollm2-135m-instruct`` is a real pretrained chat model (engine/tasks/builtin_models.py);
``tiny-llama`` is a 2-layer, 64-wide Llama with random weights and a byte-level BPE tokenizer trained
on the built-in data, for tests. Both are written once as real model folders under
``paths.builtin_models_dir()`` and loaded like any other. An empty ``model`` means tiny-llama (job
files written before SmolLM2 was built in keep their meaning); the wizard names the model it picks.

Data: JSONL, one object a line, either ``{"prompt": ..., "response": ...}`` or
``{"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}``.
Rows are rendered with the chat template ``data.chat_template`` names (auto: the
tokenizer's own; engine/tasks/chat_templates.py); a tokenizer without one uses
this fallback template (``<bos>`` and ``<eos>`` are the tokenizer's own tokens,
left out when it has none; turns are separated by a blank line)::

    <bos>### System:
    {content}

    ### User:
    {content}

    ### Assistant:
    {content}<eos>

The loss covers the assistant contents (and the end-of-sequence token after
each) only: every other position, and padding, has label -100. A row longer than
``data.max_length`` tokens is cut at the end, which keeps the start of its response;
a row whose responses are cut away entirely is reported as an Issue.

With ``data.packing`` the training rows are packed several to a sequence
(engine/tasks/packing.py); validation stays unpacked.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks import builtin_models, chat_templates, packing
from engine.tasks.base import InputError, Issue, TaskData, build_once, entry_points
from engine.tasks.chat_templates import CHAT_TEMPLATE as CHAT_TEMPLATE  # re-exported
from engine.training.speed import attention_kwargs

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

HAS_TOKENS = True

BUILTIN_MODEL = "tiny-llama"
BUILTIN_DATA = "tiny-instructions"
ROLES = ("system", "user", "assistant")
IGNORE = -100
DATA_DIR = Path(__file__).resolve().parent.parent / "resources" / "datasets" / "tiny_instructions"
# The built-in chat datasets: short-answers is for SmolLM2 (answers a fine-tune visibly changes).
DATASETS = {BUILTIN_DATA: DATA_DIR, "short-answers": DATA_DIR.parent / "short_answers"}
ROW_HINT = 'each line must be {"prompt": "...", "response": "..."} or {"messages": [{"role": "user", "content": "..."}, ...]}'
FOLDER_HINT = "set model.path to a Hugging Face model folder (config.json, weights and tokenizer files, as save_pretrained writes)"

# The fallback template: a header before each turn; the assistant's content and the
# tokenizer's eos are what the model learns to produce.
_HEADERS = {"system": "### System:\n", "user": "### User:\n", "assistant": "### Assistant:\n"}
_SEPARATOR = "\n\n"


# ---------------------------------------------------------------- rows


def _parse_row(obj: Any) -> tuple[list[dict[str, str]] | None, str | None]:
    """(messages, None) for a good row, (None, problem) for a bad one."""
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            return None, '"messages" must be a non-empty list of {"role", "content"} objects'
        out = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                return None, f'messages[{i}] needs "role" and "content"'
            if m["role"] not in ROLES:
                return None, f'unknown role "{m["role"]}" in messages[{i}] (use system, user or assistant)'
            if not isinstance(m["content"], str):
                return None, f'messages[{i}].content must be a string'
            if m["role"] == "assistant" and not m["content"].strip():
                return None, f"empty response in messages[{i}]"
            out.append({"role": m["role"], "content": m["content"]})
        if not any(m["role"] == "assistant" for m in out):
            return None, "no assistant message to learn from"
        return out, None
    missing = [k for k in ("prompt", "response") if k not in obj]
    if missing:
        return None, "missing field " + " and ".join(f'"{k}"' for k in missing)
    for key in ("prompt", "response"):
        if not isinstance(obj[key], str):
            return None, f'"{key}" must be a string'
    if not obj["response"].strip():
        return None, "empty response"
    return [{"role": "user", "content": obj["prompt"]}, {"role": "assistant", "content": obj["response"]}], None


def read_rows(path: Path, parse: Any = None, hint: str = ROW_HINT) -> tuple[list[tuple[int, Any]], list[Issue]]:
    """(line number, messages) for every good row of a JSONL file, and an Issue for every bad line.

    ``parse(obj) -> (row, problem)`` reads another row format (the preference task's); ``hint`` says it."""
    parse = parse or _parse_row
    if not path.exists():
        return [], [Issue("data file not found", f"check the path; {hint}", str(path))]
    if path.is_dir():
        return [], [Issue("expected a JSONL file, found a folder", hint, str(path))]
    rows, issues = [], []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                issues.append(Issue(f"line is not valid UTF-8 (byte {exc.start + 1})",
                                    "save the file as UTF-8", str(path), n))
                continue
            if n == 1:
                line = line.removeprefix("\ufeff")  # a byte order mark, as some Windows editors write
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                issues.append(Issue(f"invalid JSON: {exc.msg} (column {exc.colno})", hint, str(path), n))
                continue
            msgs, problem = parse(obj)
            if problem:
                issues.append(Issue(problem, hint, str(path), n))
            else:
                rows.append((n, msgs))
    if not rows and not issues:
        issues.append(Issue("the file has no rows", hint, str(path)))
    return rows, issues


# ---------------------------------------------------------------- tokenization


def _fallback_text(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    text = tokenizer.bos_token or ""
    eos = tokenizer.eos_token or ""
    spans = []
    for i, m in enumerate(messages):
        text += (_SEPARATOR if i else "") + _HEADERS[m["role"]]
        if m["role"] == "assistant":
            start = len(text)
            text += m["content"] + eos
            spans.append((start, len(text)))
        else:
            text += m["content"]
    return text, spans


def _template_text(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """Render with the chat template; an assistant turn's span is what its rendering adds after
    the generation prompt.

    Every assistant turn is learned when the template renders turns incrementally (each
    partial rendering a prefix of the whole). Templates that rewrite earlier turns (e.g.
    dropping reasoning from past answers) learn the last assistant turn only.
    """
    def render(msgs: list, gen: bool) -> str:
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)

    def span(i: int) -> tuple[int, int, str]:
        prefix = render(messages[:i], True) if i else _render_empty(tokenizer)
        full = render(messages[: i + 1], False)
        return len(prefix), len(full), full if full.startswith(prefix) and len(full) > len(prefix) else ""

    text = render(messages, False)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    spans = [span(i) for i in turns]
    if all(full and text.startswith(full) for _, _, full in spans):
        return text, [(a, b) for a, b, _ in spans]
    last = turns[-1]
    text = render(messages[: last + 1], False)
    a, b, full = span(last)
    if not full:
        raise ValueError("the chat template does not render the conversation incrementally, "
                         "so the response tokens cannot be told apart")
    return text, [(a, b)]


def _render_empty(tokenizer: Any) -> str:
    """The generation prompt before any message ('' when the template needs a message)."""
    try:
        return tokenizer.apply_chat_template([], tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - many templates index messages[0] and fail in their own ways
        return ""


def render(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The text a row becomes, and the character spans the model learns (each assistant content and its
    end token): with the tokenizer's chat template (``data.chat_template`` applied at loading), else the
    fallback."""
    if getattr(tokenizer, "chat_template", None):
        return _template_text(tokenizer, messages)
    return _fallback_text(tokenizer, messages)


def encode(tokenizer: Any, messages: list[dict[str, str]], max_length: int) -> dict[str, Any]:
    """input_ids and labels (-100 outside the assistant spans), cut to ``max_length``.

    Also returns ``prompt_tokens`` (tokens before the first response token) and
    ``full_length`` (before cutting).
    """
    text, spans = render(tokenizer, messages)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    except (NotImplementedError, ValueError, TypeError):  # a tokenizer without offsets: per segment
        ids, offsets = [], []
        cuts = sorted({0, len(text), *[c for span in spans for c in span]})
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            seg = tokenizer(text[a:b], add_special_tokens=False)["input_ids"]
            ids += seg
            offsets += [(a, b)] * len(seg)
    # A token that overlaps a response span is learned: with " Paris" after "Assistant:", the
    # space belongs to the template but the token starts the response.
    labels = [tok if any(s < b and e > a for a, b in spans) else IGNORE for tok, (s, e) in zip(ids, offsets, strict=True)]
    first = next((i for i, lab in enumerate(labels) if lab != IGNORE), len(labels))
    return {"input_ids": ids[:max_length], "labels": labels[:max_length], "prompt_tokens": first,
            "full_length": len(ids)}


class TokenRows:
    """Map-style dataset of tokenized rows; plain lists, torch-free so it pickles to workers."""

    def __init__(self, rows: list[dict[str, list[int]]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return self.rows[i]


class Collator:
    """Right-pads a batch: input_ids with the pad id, attention_mask 0 and labels -100 on padding."""

    def __init__(self, pad_id: int, multiple_of: int = 8):
        self.pad_id, self.multiple_of = pad_id, multiple_of

    def __call__(self, examples: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        import torch

        longest = max(len(e["input_ids"]) for e in examples)
        width = -(-longest // self.multiple_of) * self.multiple_of
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.long)
        labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
        for r, e in enumerate(examples):
            n = len(e["input_ids"])
            ids[r, :n] = torch.tensor(e["input_ids"])
            mask[r, :n] = 1
            labels[r, :n] = torch.tensor(e["labels"])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# ---------------------------------------------------------------- model folder


@contextlib.contextmanager
def _no_progress_bars():
    """transformers' tqdm bars would fill the job log with carriage-return lines."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def _corpus() -> list[str]:
    texts = list(_HEADERS.values())
    for split in ("train.jsonl", "validation.jsonl"):
        for _, msgs in read_rows(DATA_DIR / split)[0]:
            texts += [m["content"] for m in msgs]
    return texts


def make_tiny_model_folder(path: str | os.PathLike, seed: int = 0, chat_template: bool = True,
                           vocab_size: int = 1024) -> Path:
    """Write a tiny random Llama (hidden 64, 2 layers, 4 heads) with a byte-level BPE tokenizer.

    The tokenizer is trained on the built-in tiny-instructions text, deterministically.
    ``chat_template=False`` leaves the template out (the fallback template applies).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_corpus(), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                  model_max_length=2048)
    if chat_template:
        tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    with _no_progress_bars():
        model.save_pretrained(path)
    return path


def ensure_tiny_llama() -> Path:
    """The built-in tiny-llama model folder, written once (atomically) under EMBER_HOME."""
    from engine.api.paths import builtin_models_dir

    return build_once(builtin_models_dir() / BUILTIN_MODEL, lambda tmp: make_tiny_model_folder(tmp))


def resolve_model_dir(spec: TrainSpec) -> tuple[Path | None, list[Issue]]:
    m = spec.model
    if m.hub:  # the cached snapshot; (None, []) when the fine-tune will download it (docs/hub.md)
        from engine.tasks import hub_models

        return hub_models.resolve(m.hub, m.revision)
    if m.builtin is not None or m.path is None:
        name = m.builtin or BUILTIN_MODEL
        if name == builtin_models.SMOLLM2:
            if issues := builtin_models.problems():
                return None, issues
            return builtin_models.ensure_smollm2(), []
        if name != BUILTIN_MODEL:
            return None, [Issue(f'unknown built-in language model "{name}"',
                                f'use "{builtin_models.SMOLLM2}" or "{BUILTIN_MODEL}", or {FOLDER_HINT}')]
        return ensure_tiny_llama(), []
    return Path(m.path).expanduser(), []


def check_model_folder(folder: Path) -> list[Issue]:
    if not folder.exists():
        return [Issue("model folder not found", FOLDER_HINT, str(folder))]
    if not folder.is_dir():
        return [Issue("model.path must be a model folder, not a file", FOLDER_HINT, str(folder))]
    config = folder / "config.json"
    if not config.is_file():
        return [Issue("no config.json in the model folder", FOLDER_HINT, str(folder))]
    try:
        cfg = json.loads(config.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [Issue(f"config.json is not valid JSON ({exc})", "copy the model folder again", str(config))]
    issues = []
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    kind = cfg.get("model_type") if isinstance(cfg, dict) else None
    encoder = kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not cfg.get("is_decoder")
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or encoder:
        what = "an encoder (masked LM) model" if encoder else "not a causal language model"
        issues.append(Issue(f'model type "{kind}" is {what}: it cannot be fine-tuned to generate text',
                            "use a decoder model such as Llama, Qwen, Mistral or GPT-2", str(config)))
    weights = [p for p in folder.iterdir() if p.suffix == ".safetensors" or p.name.startswith("pytorch_model")]
    if not weights:
        issues.append(Issue("no weights in the model folder (model.safetensors or pytorch_model.bin)",
                            FOLDER_HINT, str(folder)))
    return issues


def load_tokenizer(folder: Path, template: str = "auto") -> Any:
    """The folder's tokenizer, with the chat template ``template`` (data.chat_template) in place of its own
    unless that is auto."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        tokenizer.model_has_chat_template = chat_templates.has_template(tokenizer)
        return chat_templates.apply(tokenizer, template)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, ...
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise InputError([Issue(f"could not load the tokenizer ({first})",
                                "the folder needs the tokenizer files save_pretrained writes "
                                "(tokenizer.json or tokenizer.model, tokenizer_config.json)", str(folder))]) from exc


# ---------------------------------------------------------------- the task


def resolve_data_files(spec: TrainSpec) -> tuple[Path | None, Path | None, list[Issue]]:
    d = spec.data
    if d.hub:  # a Hub dataset's files from the cache (engine/tasks/hub_data.py); none while not downloaded
        from engine.tasks import hub_data

        found = hub_data.files_for(spec)
        return found.train, found.val, found.issues
    if d.builtin is not None or d.path is None:
        name = d.builtin or BUILTIN_DATA
        if name not in DATASETS:
            names = " or ".join(f'"{n}"' for n in DATASETS)
            return None, None, [Issue(f'unknown built-in text dataset "{name}"',
                                      f'use {names}, or set data.path to a JSONL file')]
        return DATASETS[name] / "train.jsonl", DATASETS[name] / "validation.jsonl", []
    from engine.tasks.safe_archive import dataset_path
    from engine.training.context import JobFailed

    try:  # a .zip/.tar.gz JSONL dataset is unpacked safely first (engine/tasks/safe_archive.py)
        path, val_path = dataset_path(d.path), dataset_path(d.val_path)
    except JobFailed as exc:
        return None, None, [Issue(str(exc), exc.hint, d.path)]
    return Path(path).expanduser(), Path(val_path).expanduser() if val_path else None, []


def _tokenize(tokenizer: Any, path: Path, rows: list, max_length: int) -> tuple[list[dict], list[Issue], int]:
    out, issues, cut = [], [], 0
    for line, msgs in rows:
        try:
            enc = encode(tokenizer, msgs, max_length)
        except Exception as exc:  # noqa: BLE001 - a chat template may raise anything (jinja, its own checks)
            issues.append(Issue(f"the model's chat template rejected this row ({exc})",
                                "check the roles and their order for this model's template", str(path), line))
            continue
        if not any(lab != IGNORE for lab in enc["labels"]):
            issues.append(Issue(
                f"the response is cut off entirely: the text before it takes {enc['prompt_tokens']} tokens "
                f"and data.max_length is {max_length}",
                "raise data.max_length or shorten the prompt", str(path), line))
            continue
        cut += enc["full_length"] > max_length
        out.append({"input_ids": enc["input_ids"], "labels": enc["labels"]})
    return out, issues, cut


def _packing_issues(spec: TrainSpec) -> list[Issue]:
    if not spec.data.packing:
        return []
    issues = []
    if spec.method.kind == "prompt_tuning":  # peft drops position_ids for prompt tuning: examples would mix
        issues.append(Issue("data.packing does not work with method prompt_tuning (the virtual tokens need "
                            "each row to be one example)", "turn off data.packing, or use method lora or full"))
    if spec.distill is not None:
        issues.append(Issue("data.packing does not work with distillation yet",
                            "turn off data.packing for a distillation run"))
    return issues


def model_and_tokenizer(spec: TrainSpec) -> tuple[Path | None, Any, list[Issue]]:
    """(the model folder, its tokenizer, the issues found): what every language-model task reads first."""
    folder, issues = resolve_model_dir(spec)
    tokenizer = None
    if folder is not None:
        folder_issues = check_model_folder(folder)
        issues += folder_issues
        if not folder_issues:
            try:
                tokenizer = load_tokenizer(folder, spec.data.chat_template)
            except InputError as exc:
                issues += exc.issues
    return folder, tokenizer, issues


def _prepare(spec: TrainSpec) -> tuple[TaskData | None, list[Issue]]:
    folder, tokenizer, issues = model_and_tokenizer(spec)
    train_path, val_path, data_issues = resolve_data_files(spec)
    issues += data_issues + _packing_issues(spec)
    if train_path is None:
        return None, issues
    train_rows, row_issues = read_rows(train_path)
    issues += row_issues
    val_rows: list = []
    if val_path is not None:
        val_rows, row_issues = read_rows(val_path)
        issues += row_issues
    if tokenizer is None:
        return None, issues
    if val_path is None and train_rows:
        if len(train_rows) < 2:
            issues.append(Issue("one row cannot be split into training and validation",
                                "add rows or set data.val_path", str(train_path)))
        rng = random.Random(spec.seed)
        shuffled = list(train_rows)
        rng.shuffle(shuffled)
        n_val = min(max(1, round(len(shuffled) * spec.data.val_fraction)), len(shuffled) - 1)
        val_rows, train_rows = sorted(shuffled[:n_val]), sorted(shuffled[n_val:])
        val_path = train_path
    train, tok_issues, cut_train = _tokenize(tokenizer, train_path, train_rows, spec.data.max_length)
    val, val_issues, cut_val = _tokenize(tokenizer, val_path, val_rows, spec.data.max_length)
    issues += tok_issues + val_issues
    if issues:
        return None, issues
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    info = {
        "model_dir": str(folder),
        "pad_id": pad_id,
        "train_size": len(train),
        "val_size": len(val),
        "train_tokens": sum(len(r["input_ids"]) for r in train),
        "target_tokens": sum(sum(lab != IGNORE for lab in r["labels"]) for r in train),
        "truncated_rows": int(cut_train + cut_val),
        "chat_template": tokenizer.model_has_chat_template,  # the model's own
        "chat_template_name": chat_templates.used_name(tokenizer.model_has_chat_template, spec.data.chat_template),
        "max_length": spec.data.max_length,
    }
    train_set: Any = TokenRows(train)
    collate: Any = Collator(pad_id)
    val_collate = None
    if spec.data.packing:
        train_set, pack_info = packing.pack(train_set, spec.data.max_length, spec.batch_size, spec.seed)
        info.update(pack_info, packing=True)
        collate, val_collate = packing.PackedCollator(pad_id, plain=Collator(pad_id)), Collator(pad_id)
    lengths = None
    if spec.data.group_by_length:
        lengths = ([train_set.row_length(i) for i in range(len(train_set))] if spec.data.packing
                   else [len(r["input_ids"]) for r in train])
    return TaskData(train=train_set, val=TokenRows(val), collate=collate, info=info, lengths=lengths,
                    val_collate=val_collate, val_messages=[msgs for _, msgs in val_rows]), []


# Model folder, tokenizer, and every data row (parse, fields, roles, response kept after cutting).
validate, load_data = entry_points(_prepare)


def build_model(spec: TrainSpec, data: TaskData) -> torch.nn.Module:
    """The model in fp32 on CPU; for method qlora, 4-bit NF4 on this rank's GPU (engine.training.methods)."""
    import torch
    from transformers import AutoModelForCausalLM

    if data.info.get("model_dir"):
        folder, issues = Path(data.info["model_dir"]), []
    else:
        folder, issues = resolve_model_dir(spec)
    if folder is not None:
        issues += check_model_folder(folder)
    if issues or folder is None:
        raise InputError(issues)
    from engine.training import methods

    extra = methods.load_kwargs(spec)  # QLoRA: the base in 4-bit NF4 on the GPU; nothing otherwise
    quant = extra.get("quantization_config")
    dtype = quant.bnb_4bit_compute_dtype if quant is not None else torch.float32
    try:
        with _no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=dtype,
                                                         **attention_kwargs(spec), **extra)
    except Exception as exc:  # noqa: BLE001 - damaged weights, unknown architectures, missing shards, ...
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        if attention_kwargs(spec) and "attention" in first.lower():
            raise InputError([Issue(f"speed.attention {spec.speed.attention} cannot be used ({first})",
                                    "set speed.attention to auto", str(folder))]) from exc
        raise InputError([Issue(f"could not load the model ({type(exc).__name__}: {first})",
                                "check that the weights match config.json and are complete; copy the folder again",
                                str(folder))]) from exc
    model.config.use_cache = False
    if spec.data.packing and (problem := packing.check_boundaries(model, logits)):
        raise InputError([Issue(f"data.packing cannot be used with this model: {problem}",
                                "turn off data.packing, or set speed.attention to sdpa or eager", str(folder))])
    return model


def logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's logits for a padded batch (attention_mask) or a packed one (position_ids).

    use_cache=False matters for packing too: with a KV cache, transformers does not read
    packed sequences from the position ids and the examples would attend to each other.
    """
    kwargs: dict[str, Any] = {}
    if "position_ids" in batch:
        kwargs = packing.model_kwargs(model, batch)
    elif "attention_mask" in batch:
        kwargs = {"attention_mask": batch["attention_mask"]}
    return model(input_ids=batch["input_ids"], use_cache=False, **kwargs).logits


def _loss_sum(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    import torch.nn.functional as F

    labels = batch["labels"]
    logits_ = logits(model, batch)
    if logits_.shape[1] > labels.shape[1]:  # prompt tuning prepends virtual tokens
        logits_ = logits_[:, -labels.shape[1]:]
    logits_ = logits_[:, :-1].float()
    targets = labels[:, 1:]
    loss_sum = F.cross_entropy(logits_.reshape(-1, logits_.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE, reduction="sum")
    return loss_sum, (targets != IGNORE).sum()


def forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean cross-entropy over the response tokens.

    Stats: samples (examples, also in a packed batch), tokens (real, non-pad), positions
    (rows x width, all computed), target_tokens.
    """
    loss_sum, n = _loss_sum(model, batch)
    ids = batch["input_ids"]
    if "row_tokens" in batch:  # packed
        samples, tokens = float(batch["row_examples"].sum()), float(batch["row_tokens"].sum())
    else:
        samples, tokens = float(ids.shape[0]), float(batch["attention_mask"].sum())
    stats = {"samples": samples, "tokens": tokens, "positions": float(ids.numel()), "target_tokens": float(n)}
    return loss_sum / n.clamp(min=1), stats


def eval_sums(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    import torch

    with torch.no_grad():
        loss_sum, n = _loss_sum(model, batch)
    return {"loss_sum": float(loss_sum), "tokens": float(n)}


def finalize_metrics(sums: dict[str, float]) -> dict[str, float]:
    tokens = sums.get("tokens", 0.0)
    if not tokens:
        return {"loss": float("nan"), "perplexity": float("nan")}
    loss = sums["loss_sum"] / tokens
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf")}


def lora_targets(model: torch.nn.Module) -> list[str]:
    """q_proj/v_proj (Llama, Qwen, Mistral, ...), c_attn (GPT-2), query_key_value (GPT-NeoX, Falcon)."""
    leaves = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    for targets in (["q_proj", "v_proj"], ["c_attn"], ["query_key_value"], ["Wqkv"], ["qkv_proj"]):
        if all(t in leaves for t in targets):
            return targets
    from torch import nn

    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, nn.Linear) and not name.endswith("lm_head")})


def block_types(model: torch.nn.Module) -> tuple[type, ...]:
    """The decoder layer class (from the model's ``_no_split_modules``, e.g. LlamaDecoderLayer)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    found: list[type] = []
    for module in model.modules():
        if type(module).__name__ in names and type(module) not in found:
            found.append(type(module))
    if found:
        return tuple(found)
    from torch import nn

    for module in model.modules():  # no hint: the repeated layers of the first ModuleList
        if isinstance(module, nn.ModuleList) and len(module) > 1 and len({type(m) for m in module}) == 1:
            return (type(module[0]),)
    return ()
