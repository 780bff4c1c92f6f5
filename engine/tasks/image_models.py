"""Image models: torchvision architectures, the small CNN, local weights files and heads.

``ARCHS`` are the architectures ``model.arch`` names: ``small_cnn`` (the built-in
``digits-cnn``, random init) and three torchvision models (random init or a local
state_dict file: .pt/.pth/.bin or .safetensors). The classification head is always
replaced to fit the dataset's classes. The API the image classification task uses:

- ``check(spec)``: every problem with the model settings and the weights file;
- ``build(spec, num_labels)``: the model, with the weights file loaded when one is set;
- ``read_state_dict(path)`` and ``fit_state_dict(...)``: read and check a weights file;
- ``block_types``, ``lora_targets`` and ``head_modules``: where LoRA goes, what trains in full.

torch and torchvision are imported inside functions only.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks.base import InputError, Issue

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

ARCHS = ("small_cnn", "resnet18", "mobilenet_v3_small", "efficientnet_b0")
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")
BUILTIN_MODEL = "digits-cnn"
# The classification head of each architecture: replaced for the dataset's classes,
# trained in full under LoRA (modules_to_save).
HEADS = {"small_cnn": "head", "resnet18": "fc", "mobilenet_v3_small": "classifier.3",
         "efficientnet_b0": "classifier.1"}

ARCH_HINT = "use one of: " + ", ".join(ARCHS)


# ---------------------------------------------------------------- the small CNN


_CLASSES: dict[str, type] = {}
_CLASSES_LOCK = threading.Lock()


def small_cnn_classes() -> dict[str, type]:
    """Define ConvBlock and SmallCNN on first use (torch is imported lazily).

    Module ``__getattr__`` exposes them as ``engine.tasks.image_models.SmallCNN`` (and
    ``engine.tasks.image_classification`` forwards the names, so pickles made before
    the move still load): pickling and ``torch.save(model)`` find them like any
    module-level class.
    """
    with _CLASSES_LOCK:
        if _CLASSES:
            return _CLASSES
        from torch import nn

        class ConvBlock(nn.Module):
            """conv3x3-BN-ReLU, then 2x2 max-pool: halves the resolution."""

            def __init__(self, cin: int, cout: int):
                super().__init__()
                self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
                self.bn = nn.BatchNorm2d(cout)
                self.act = nn.ReLU(inplace=True)
                self.pool = nn.MaxPool2d(2)

            def forward(self, x):
                return self.pool(self.act(self.bn(self.conv(x))))

        class SmallCNN(nn.Module):
            """A stride-2 stem, three ConvBlocks (32, 64, 128 channels), global average pool, linear head.

            About 0.1M parameters; on digits (32x32) it passes 98% validation accuracy in
            300 steps of batch 32, in about 10 s on one CPU thread.
            """

            def __init__(self, num_labels: int, widths: tuple[int, ...] = (32, 64, 128), stem: int = 16,
                         dropout: float = 0.1):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, stem, 3, stride=2, padding=1, bias=False),
                                          nn.BatchNorm2d(stem), nn.ReLU(inplace=True))
                chans = (stem, *widths)
                self.blocks = nn.Sequential(*(ConvBlock(a, b) for a, b in zip(chans[:-1], chans[1:], strict=True)))
                self.pool = nn.AdaptiveAvgPool2d(1)
                self.dropout = nn.Dropout(dropout)
                self.head = nn.Linear(widths[-1], num_labels)

            def forward(self, x):
                x = self.blocks(self.stem(x))
                return self.head(self.dropout(self.pool(x).flatten(1)))

        for cls in (ConvBlock, SmallCNN):
            cls.__module__, cls.__qualname__ = __name__, cls.__name__
        _CLASSES.update(ConvBlock=ConvBlock, SmallCNN=SmallCNN)
        return _CLASSES


def __getattr__(name: str) -> Any:
    if name in ("ConvBlock", "SmallCNN"):
        return small_cnn_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- building


def _arch(spec: TrainSpec) -> str:
    return spec.model.arch or "small_cnn"


def new_model(arch: str, num_labels: int) -> torch.nn.Module:
    """A randomly initialised ``arch`` with a ``num_labels``-way head."""
    if arch == "small_cnn":
        return small_cnn_classes()["SmallCNN"](num_labels)
    import torchvision

    return getattr(torchvision.models, arch)(weights=None, num_classes=num_labels)


def check(spec: TrainSpec) -> list[Issue]:
    """Every problem with the model settings, the weights file (read and fitted) included."""
    m = spec.model
    issues = []
    if m.builtin is not None and m.builtin != BUILTIN_MODEL:
        issues.append(Issue(f'unknown built-in image model "{m.builtin}"',
                            f'use "{BUILTIN_MODEL}", or set model.arch (and model.path for a weights file)'))
    if m.arch is not None and m.arch not in ARCHS:
        issues.append(Issue(f'unknown model.arch "{m.arch}"', ARCH_HINT))
    elif m.builtin == BUILTIN_MODEL and m.arch not in (None, "small_cnn"):
        issues.append(Issue(f'model.builtin "{BUILTIN_MODEL}" is a small_cnn, not {m.arch}',
                            "unset model.builtin to train a torchvision architecture"))
    if m.path and m.builtin is None:
        path = Path(m.path).expanduser()
        if not path.exists():
            issues.append(Issue("weights file not found", "check model.path", str(path)))
        elif path.is_dir():
            issues.append(Issue("model.path is a folder; image models take one weights file",
                                "point model.path at a .pt, .pth or .safetensors state_dict", str(path)))
        elif path.suffix.lower() not in WEIGHT_SUFFIXES:
            issues.append(Issue(f'unsupported weights file type "{path.suffix}"',
                                "use a state_dict saved as .pt/.pth (torch.save) or .safetensors", str(path)))
        elif m.arch is None:
            issues.append(Issue("model.path needs model.arch",
                                f"set model.arch to the architecture the weights were saved from ({', '.join(ARCHS)})",
                                str(path)))
        elif not issues:
            try:
                fit_state_dict(read_state_dict(path), m.arch, path, arch_shapes(m.arch))
            except InputError as exc:
                issues += exc.issues
    return issues


STATE_DICT_HINT = ("save the weights with torch.save(model.state_dict(), path) or as .safetensors; "
                   "if the file was damaged in transfer, copy or export it again")


def read_state_dict(path: Path) -> dict[str, Any]:
    """The tensors of a .pt/.pth/.bin (torch.save) or .safetensors file; InputError says what is wrong."""
    import pickle

    import torch

    def bad(message: str, exc: BaseException | None = None) -> InputError:
        first = str(exc).strip().splitlines()[0].split(". ")[0].rstrip(".") if exc and str(exc).strip() else ""
        detail = f" ({first[:160]})" if first else ""
        return InputError([Issue(message + detail, STATE_DICT_HINT, str(path))])

    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            sd: Any = load_file(str(path))
        except (SafetensorError, OSError) as exc:
            raise bad("the .safetensors file is damaged or incomplete", exc) from exc
    else:
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic[:2] != b"PK" and magic[:1] != b"\x80":
            raise bad("not a PyTorch weights file: it is neither a torch.save archive nor a pickle")
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise bad("the file holds pickled Python objects (for example a whole model), not only tensors; "
                      "Ember loads state_dicts only, never code from a weights file") from exc
        except (RuntimeError, EOFError, OSError, ValueError) as exc:
            raise bad("the weights file is damaged or incomplete", exc) from exc
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(sd, dict) and isinstance(sd.get(key), dict):
            sd = sd[key]
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise bad("the weights file does not hold a state_dict (a dict of tensor names to tensors)")
    out = {}
    for k, v in sd.items():
        for prefix in ("module.", "_orig_mod."):
            k = k.removeprefix(prefix)
        out[k] = v
    return out


@functools.cache
def arch_shapes(arch: str) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of the architecture's state_dict (a 2-class head), built once per process."""
    return {k: tuple(v.shape) for k, v in new_model(arch, 2).state_dict().items()}


def guess_arch(keys: set[str]) -> str | None:
    for arch in ARCHS:
        own = set(arch_shapes(arch))
        if len(own & keys) >= 0.9 * len(own):
            return arch
    return None


def fit_state_dict(sd: dict[str, Any], arch: str, path: Path, own: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The tensors of ``sd`` to load into a model with these shapes; the file's head only if it fits."""
    head = HEADS[arch] + "."
    body = {k: v for k, v in sd.items() if not (k.startswith(head) and own.get(k) != tuple(v.shape))}
    unexpected = sorted(k for k in body if k not in own)
    wrong = sorted(k for k in body if k in own and own[k] != tuple(body[k].shape))
    missing = sorted(k for k in own if k not in body and not k.startswith(head))
    if unexpected or wrong or missing:
        guess = guess_arch(set(sd))
        example = (wrong or missing or unexpected)[0]
        what = "wrongly shaped" if wrong else "missing" if missing else "unexpected"
        fix = (f"the file looks like {guess}: set model.arch to {guess}" if guess and guess != arch else
               f"use a state_dict saved from torchvision's {arch} (or a model fine-tuned from it)")
        raise InputError([Issue(
            f"the weights do not fit {arch}: {len(missing)} tensors missing, {len(unexpected)} unexpected, "
            f"{len(wrong)} of the wrong shape (first {what}: {example})", fix, str(path))])
    return body


def build(spec: TrainSpec, num_labels: int) -> torch.nn.Module:
    """The model the spec names with a ``num_labels``-way head; InputError lists what is wrong."""
    issues = check(spec)
    if issues:
        raise InputError(issues)
    arch = _arch(spec)
    model = new_model(arch, num_labels)
    if spec.model.path and spec.model.builtin is None:
        path = Path(spec.model.path).expanduser()
        own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        model.load_state_dict(fit_state_dict(read_state_dict(path), arch, path, own), strict=False)
    return model.float()


# ---------------------------------------------------------------- blocks, LoRA targets and heads


def block_types(model: torch.nn.Module) -> tuple[type, ...]:
    """BasicBlock (resnet18), InvertedResidual (mobilenet_v3), MBConv (efficientnet), ConvBlock (small_cnn)."""
    candidates = {"BasicBlock", "Bottleneck", "InvertedResidual", "MBConv", "FusedMBConv", "ConvBlock"}
    found: list[type] = []
    for module in model.modules():
        cls = type(module)
        if cls.__name__ in candidates and cls not in found:
            found.append(cls)
    return tuple(found)


def lora_targets(model: torch.nn.Module) -> list[str]:
    """Full names of the ungrouped Conv2d and Linear layers inside the repeated blocks.

    Depthwise convolutions (groups > 1) and the stem and head stay out: LoRA on a
    depthwise conv adds little, and the head is new and trained in full (``head_modules``).
    """
    from torch import nn

    kinds = block_types(model)
    blocks = [name for name, m in model.named_modules() if kinds and isinstance(m, kinds)]
    out = []
    for name, m in model.named_modules():
        if not any(name.startswith(b + ".") for b in blocks):
            continue
        if (isinstance(m, nn.Conv2d) and m.groups == 1) or isinstance(m, nn.Linear):
            out.append(name)
    return out


def head_modules(model: torch.nn.Module) -> list[str]:
    """The classification head (new for each dataset): train it in full, e.g. peft ``modules_to_save``."""
    by_class = {"SmallCNN": "small_cnn", "ResNet": "resnet18", "MobileNetV3": "mobilenet_v3_small",
                "EfficientNet": "efficientnet_b0"}
    names = dict(model.named_modules())
    for module in model.modules():
        arch = by_class.get(type(module).__name__)
        if arch:
            head = HEADS[arch]
            prefix = next((n for n, m in names.items() if m is module), "")
            return [f"{prefix}.{head}" if prefix else head]
    return []
