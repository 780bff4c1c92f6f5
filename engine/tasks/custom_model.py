"""A model from the user's own Python file (``model.code``), built in the job process only.

The engine refused the job until the user confirmed the file's sha256 (engine/api/custom_code.py);
here, in the job process, the file is read once, hashed again and refused if it changed
since then, and those same bytes (never a second read of the file) are compiled and run
as a module with a unique name. The engine and the GUI never import it.

The entry (``model.code_entry``, default ``build_model``) is a function or a class. It is
called with the keyword arguments its signature names out of:

- ``num_labels`` (int): the dataset's classes; the model returns that many logits;
- ``spec`` (TrainSpec): the whole spec;
- ``vocab_size`` (int, text): the tokenizer's size, for an embedding table;
- ``image_size`` (int, images): the side of the square input;
- ``data_info`` (dict): what the task knows about the data (label names, counts, ...).

A ``**kwargs`` entry gets all of them. It returns a ``torch.nn.Module`` whose forward takes

- image_classification: ``pixel_values`` (float, [batch, 3, image_size, image_size]) and returns
  logits [batch, num_labels];
- text_classification: ``input_ids`` and ``attention_mask`` (long, [batch, seq]; ``token_type_ids``
  too when its forward names it or takes ``**kwargs``) and returns logits [batch, num_labels] or an
  object with ``.logits``. The tokenizer is that of ``model.builtin`` / ``model.path`` (MiniLM's by
  default); its weights are not loaded.

One forward pass on two validation examples checks the model before training starts.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import traceback
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks.base import TaskData, load_tokenizer
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

ARGUMENTS = ("num_labels", "spec", "vocab_size", "image_size", "data_info")
CONFIRM_HINT = "Start the job again from the wizard or `ember run` and confirm the file you want to run."


def read_verified(spec: TrainSpec) -> tuple[Path, bytes]:
    """The code file's bytes, refused unless they hash to ``model.code_sha256``."""
    path = Path(str(spec.model.code)).expanduser()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise JobFailed(f"The model code file {path} is missing",
                        "Put the file back, or point model.code at it and confirm it again.") from None
    except OSError as exc:
        raise JobFailed(f"Cannot read the model code file {path}: {exc.strerror or exc}",
                        "Make the file readable by you.") from None
    approved = spec.model.code_sha256
    if not approved:
        raise JobFailed(f"{path} was never confirmed (model.code_sha256 is not set)", CONFIRM_HINT)
    if hashlib.sha256(data).hexdigest() != approved:
        raise JobFailed(f"{path} changed after you confirmed it; confirm again", CONFIRM_HINT)
    return path, data


def _user_line(exc: BaseException, filename: str) -> int | None:
    """The last line of the user's file in the exception's traceback."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            line = frame.lineno
    return line


def load_module(path: Path, data: bytes) -> types.ModuleType:
    """Run the verified bytes as a fresh module named after their hash (unique per file version)."""
    import importlib.util

    filename = str(path.resolve())
    try:
        code = compile(data, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        raise JobFailed(f"Syntax error in {path}{where}: {exc.msg}",
                        f"Fix line {exc.lineno} of the file, then confirm it again." if exc.lineno
                        else "Fix the file, then confirm it again.") from None
    except ValueError as exc:  # e.g. null bytes
        raise JobFailed(f"{path} is not Python source: {exc}", "Point model.code at a .py file.") from None
    name = f"ember_user_model_{hashlib.sha256(data).hexdigest()[:16]}"
    # A spec without a loader: the module runs the bytes hashed above, never a second read of the file.
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=filename))
    module.__file__ = filename
    sys.modules[name] = module  # pickling, dataclasses and typing look classes up here
    try:
        exec(code, module.__dict__)  # noqa: S102 - the user confirmed exactly these bytes
    except Exception as exc:  # noqa: BLE001 - any failure at import means the same to the user
        sys.modules.pop(name, None)
        line = _user_line(exc, filename)
        where = f" (line {line})" if line else ""
        raise JobFailed(f"Running {path} failed{where}: {type(exc).__name__}: {exc}",
                        "Fix the file (it runs top to bottom when the job starts), then confirm it again.") from None
    return module


def call_entry(entry: Any, values: dict[str, Any], where: str) -> Any:
    """Call ``entry`` with the arguments its signature names (all of them for ``**kwargs``)."""
    try:
        params = inspect.signature(entry).parameters
    except (TypeError, ValueError):
        params = {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = dict(values)
    else:
        kwargs = {k: v for k, v in values.items() if k in params}
        unknown = [n for n, p in params.items() if n not in values and p.default is inspect.Parameter.empty
                   and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
                   and n != "self"]
        if unknown:
            raise JobFailed(f"{where} needs argument(s) {', '.join(unknown)} that Ember does not provide",
                            f"Take any of: {', '.join(ARGUMENTS)} (see docs/custom-models.md).")
    try:
        return entry(**kwargs)
    except JobFailed:
        raise
    except Exception as exc:  # noqa: BLE001
        raise JobFailed(f"{where} raised {type(exc).__name__}: {exc}",
                        "Fix the model code, then confirm it again.") from exc


class TextAdapter:
    """Made on first use (torch imported lazily): a text module's output as ``.logits``, its arguments filtered."""

    _cls: type | None = None

    @classmethod
    def wrap(cls, inner: Any) -> Any:
        if cls._cls is None:
            from torch import nn

            class CustomTextModel(nn.Module):
                """Passes the batch keys the user's forward names; returns an object with ``.logits``."""

                def __init__(self, model: nn.Module):
                    super().__init__()
                    self.model = model
                    params = inspect.signature(model.forward).parameters
                    self.takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
                    self.names = set(params)

                def forward(self, **batch: Any) -> Any:
                    if not self.takes_all:
                        batch = {k: v for k, v in batch.items() if k in self.names}
                    out = self.model(**batch)
                    return out if hasattr(out, "logits") else types.SimpleNamespace(logits=out)

            cls._cls = CustomTextModel
        return cls._cls(inner)


def build(spec: TrainSpec, data: TaskData) -> torch.nn.Module:
    """The user's model, checked by one forward pass (fp32, CPU, train mode)."""
    import torch

    path, source = read_verified(spec)
    module = load_module(path, source)
    entry_name = spec.model.code_entry
    entry = getattr(module, entry_name, None)
    if entry is None or not callable(entry):
        found = sorted(n for n, v in vars(module).items()
                       if callable(v) and not n.startswith("_") and getattr(v, "__module__", "") == module.__name__)
        what = "is not a function or class" if entry is not None else "is not defined"
        raise JobFailed(f"{entry_name} {what} in {path}",
                        f"Set model.code_entry to one of: {', '.join(found)}" if found
                        else f"Define a function {entry_name}(num_labels, spec) that returns a torch.nn.Module.")
    values = {"num_labels": int(data.info["num_labels"]), "spec": spec, "data_info": dict(data.info),
              "image_size": spec.data.image_size}
    if spec.task == "text_classification":
        values["vocab_size"] = _vocab_size(data)
    where = f"{path.name}:{entry_name}"
    model = call_entry(entry, values, where)
    if not isinstance(model, torch.nn.Module):
        raise JobFailed(f"{where} returned {type(model).__name__}, not a torch.nn.Module",
                        "Return the model instance (a subclass of torch.nn.Module).")
    if spec.task == "text_classification":
        model = TextAdapter.wrap(model)
    if not any(True for _ in model.parameters()):
        raise JobFailed(f"{where} returned a model without parameters", "Nothing would train; add layers.")
    model = model.float()
    _try_one_batch(model, spec, data, where)
    return model


def _vocab_size(data: TaskData) -> int:
    return len(load_tokenizer(Path(data.info["model_dir"])))


def _try_one_batch(model: Any, spec: TrainSpec, data: TaskData, where: str) -> None:
    """One forward pass on two validation examples: shape and type errors show before training starts."""
    import torch

    source = data.val if len(data.val) else data.train
    batch = data.collate([source[i] for i in range(min(2, len(source)))])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(**inputs) if spec.task == "text_classification" else model(inputs["pixel_values"])
    except Exception as exc:  # noqa: BLE001 - whatever forward raises, the user needs to see it
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in inputs.items())
        raise JobFailed(f"{where}: forward failed on one batch ({shapes}): {type(exc).__name__}: {exc}",
                        "Fix the model's forward for inputs of these shapes (docs/custom-models.md).") from exc
    finally:
        model.train(was_training)
    logits = getattr(out, "logits", out)
    want = (len(batch["labels"]), int(data.info["num_labels"]))
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != want:
        got = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise JobFailed(f"{where}: forward returned {got}, expected logits of shape {list(want)}",
                        "Return one logit per class for each example: [batch, num_labels].")
