"""Open any model a user can try in the Playground, as a chat model or a classifier.

A reference (what the engine hands the worker) is one of:
``{"run_dir": path}`` a finished fine-tune or compression variant; ``{"builtin": name, "task": task}``;
``{"path": folder}`` a Hugging Face folder; ``{"hub": id, "revision": rev}`` a model in the Hugging Face
cache (never downloaded here). Errors are JobFailed with a message and a hint. (A served endpoint's chat
needs no worker: the engine streams it, engine/daemon/endpoints.py.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api.train_spec import TrainSpec
from engine.tasks.base import InputError, TaskData
from engine.training.context import JobFailed

CLASSIFIER_TASKS = ("text_classification", "image_classification")
DEFAULT_CHAT_MODEL = "smollm2-135m-instruct"


@dataclass
class Classifier:
    """A text classifier: probabilities of every class for one text."""

    model: Any
    tokenizer: Any
    labels: list[str]
    max_length: int = 128
    runner: Any = None  # an ONNX Runtime session (engine.evaluate.runners.OrtRunner) for ONNX variants
    image: Any = None  # an image classifier: (side in pixels, the validation transform); None: text

    def _image_logits(self, path: Path) -> Any:
        """The run's own validation preprocessing: decoded, resized to its image size, normalised."""
        import numpy as np

        from engine.tasks.image_classification import open_rgb
        from engine.training.context import JobFailed

        size, transform = self.image
        try:
            pixels = transform(open_rgb(path, size)).unsqueeze(0)
        except (OSError, ValueError) as exc:
            raise JobFailed(f"Cannot read the image {path.name}: {exc}",
                            "Pick a PNG, JPEG, BMP, GIF or WebP file.") from exc
        if self.runner is not None:
            return np.asarray(self.runner.run({"pixel_values": pixels.numpy()}))[0]
        import torch

        with torch.inference_mode():
            out = self.model(pixels.to(next(self.model.parameters()).device))
        return (out.logits if hasattr(out, "logits") else out)[0].float().cpu().numpy()

    def predict(self, text: str | None = None, image: str | None = None) -> dict[str, Any]:
        import time

        import numpy as np

        from engine.training.context import JobFailed

        t0 = time.perf_counter()
        if (image is None) != (self.image is None):
            what = "an image" if self.image is not None else "text"
            raise JobFailed(f"This classifier takes {what}", f"Send it {what} to classify.")
        if self.image is not None:
            logits = self._image_logits(Path(str(image)))
        else:
            enc = self.tokenizer([text or ""], truncation=True, max_length=self.max_length, padding=True,
                                 return_tensors="np" if self.runner is not None else "pt")
            if self.runner is not None:
                logits = np.asarray(self.runner.run(dict(enc)))[0]
            else:
                import torch

                with torch.inference_mode():
                    device = next(self.model.parameters()).device  # a GPU when the worker has one
                    inputs = {k: v.to(device) for k, v in enc.items()
                              if k in ("input_ids", "attention_mask", "token_type_ids")}
                    logits = self.model(**inputs).logits[0].float().cpu().numpy()
        probs = np.exp(logits - logits.max())
        probs = probs / probs.sum()
        order = np.argsort(-probs)
        return {"label": self.labels[int(order[0])], "labels": list(self.labels),
                "probs": [float(p) for p in probs], "seconds": time.perf_counter() - t0}


    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """(one vector per text: the encoder's last hidden states averaged over the text's tokens, the tokens
        read); a text classifier's torch model only."""
        if self.image is not None or self.runner is not None:
            what = "an image classifier" if self.image is not None else "an ONNX variant (no hidden states)"
            raise JobFailed(f"This model is {what}: embeddings come from a text encoder's hidden states",
                            "Serve the fine-tune itself (a text classifier) for /v1/embeddings.")
        import torch

        enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=True,
                             return_tensors="pt")
        device = next(self.model.parameters()).device
        inputs = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            hidden = self.model(**inputs, output_hidden_states=True).hidden_states[-1].float()
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        vectors = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return vectors.cpu().tolist(), int(inputs["attention_mask"].sum())


def _causal_folder(spec: TrainSpec) -> Path:
    from engine.tasks import causal_lm

    folder, issues = causal_lm.resolve_model_dir(spec)
    if folder is not None:
        issues = issues or causal_lm.check_model_folder(folder)
    if issues or folder is None:
        raise InputError(issues)
    return folder


def _chat(model: Any, folder: Path, device: str, template: str = "auto") -> Any:
    """A chat model; ``template`` is the chat template a tuned run trained with (data.chat_template), which
    the Playground's "model" template then means."""
    from engine.inference.chat import ChatModel
    from engine.tasks import causal_lm

    return ChatModel(model.to(device), causal_lm.load_tokenizer(folder, template), device)


def _from_run(run_dir: Path, device: str) -> tuple[str, Any, dict[str, Any]]:
    from engine.trainer import source as src

    source = src.open_source(run_dir)
    info = {"task": source.spec.task, "name": run_dir.name, "variant": (source.meta.get("variant") or {})}
    data = TaskData(train=[], val=[], collate=None, info=dict(source.meta.get("data_info") or {}))
    onnx = source.weights_file().suffix == ".onnx"
    if source.spec.task == "causal_lm":
        if onnx:
            raise JobFailed(f"{run_dir.name} is an ONNX variant of a language model; the Playground chats with "
                            "torch models", "Pick its parent run, or a merged or pruned variant.")
        folder = Path(data.info.get("model_dir") or _causal_folder(source.spec))
        model = src.load_model(source, data)
        model.config.use_cache = True
        template = source.spec.data.chat_template
        return "chat", _chat(model, folder, device, template), {**info, "chat_template": template}
    if source.spec.task not in CLASSIFIER_TASKS:
        raise JobFailed(f"{run_dir.name} is an {source.spec.task.replace('_', ' ')} model",
                        "Pick a classifier or a language model.")
    if source.spec.task == "image_classification":
        return "classify", _image_classifier(source, data, onnx, device), info
    from engine.tasks import text_classification as tc
    from engine.tasks.base import load_tokenizer

    folder = tc.sources(source.spec).model_dir
    if folder is None:
        raise JobFailed(f"Cannot find the base model of {run_dir.name}", "Put its model folder back.")
    labels = list(data.info.get("label_names") or [])
    tokenizer = load_tokenizer(Path(folder))
    if onnx:
        from engine.evaluate.runners import OrtRunner

        runner = OrtRunner(source.weights_file(), "text_classification")
        return "classify", Classifier(None, tokenizer, labels, source.spec.data.max_length, runner), info
    model = src.load_model(source, data).to(device)
    return "classify", Classifier(model, tokenizer, labels, source.spec.data.max_length), info


def _hub_folder(repo: str, revision: str | None) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the Playground never downloads: the Models page does
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except LocalEntryNotFoundError as exc:
        raise JobFailed(f"{repo} is not in the Hugging Face cache", "Download it first (Models page, or "
                        f"`ember models download {repo}`), or copy its folder here and pick the folder.") from exc


def model_folder(ref: dict[str, Any]) -> Path:
    """The Hugging Face folder of a base model reference (builtin, path or hub); InputError or JobFailed."""
    if ref.get("hub"):
        return _hub_folder(ref["hub"], ref.get("revision"))
    if ref.get("path"):
        return Path(ref["path"]).expanduser()
    return _causal_folder(TrainSpec(task="causal_lm", model={"builtin": ref.get("builtin") or DEFAULT_CHAT_MODEL}))


def pick_device(wanted: str) -> str:
    """cuda or cpu for a spec's ``device`` (auto: a CUDA GPU when there is one)."""
    import torch

    if wanted == "cuda" and not torch.cuda.is_available():
        raise JobFailed("device cuda was asked for, and torch sees no CUDA GPU here", "Use device auto or cpu.")
    return "cuda" if wanted != "cpu" and torch.cuda.is_available() else "cpu"


def open_model(ref: dict[str, Any], device: str = "cpu") -> tuple[str, Any, dict[str, Any]]:
    """(``"chat"`` or ``"classify"``, the loaded model, facts to show) for a reference."""
    try:
        if ref.get("run_dir"):
            return _from_run(Path(ref["run_dir"]), device)
        folder = model_folder(ref)
        name = str(ref.get("hub") or ref.get("path") or ref.get("builtin") or DEFAULT_CHAT_MODEL)
        from engine.inference.runtimes import open_file, runtime_of

        if ref.get("path") and (runtime := runtime_of(folder)):  # a GGUF file or an ONNX-GenAI folder
            return "chat", open_file(folder), {"task": "causal_lm", "name": name, "runtime": runtime}
        from engine.tasks import causal_lm

        if issues := causal_lm.check_model_folder(folder):
            raise InputError(issues)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype="auto")
        model = model.float() if device == "cpu" else model
        return "chat", _chat(model, folder, device), {"task": "causal_lm", "name": name}
    except InputError as exc:
        raise JobFailed(str(exc), exc.hint) from exc



def _image_classifier(source: Any, data: TaskData, onnx: bool, device: str) -> Classifier:
    from engine.tasks.image_classification import build_transform
    from engine.trainer import source as src

    labels = list(data.info.get("label_names") or [])
    image = (source.spec.data.image_size, build_transform(source.spec, train=False))
    if onnx:
        from engine.evaluate.runners import OrtRunner

        runner = OrtRunner(source.weights_file(), "image_classification")
        return Classifier(None, None, labels, runner=runner, image=image)
    return Classifier(src.load_model(source, data).to(device), None, labels, image=image)
