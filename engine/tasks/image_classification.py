"""Image classification: a folder of class subfolders -> a torchvision model or a small CNN.

Data: ``data.path`` is a folder with one subfolder per class holding PNG or JPEG
files (ImageFolder layout); every image is converted to RGB and resized to
``data.image_size`` squared. ``data.val_path`` is an optional folder of the same
shape; without it a seeded, stratified ``data.val_fraction`` of each class is held
out. The built-in dataset ``digits`` is scikit-learn's ``load_digits`` (1,797 real
8x8 scans), rendered once as 32x32 PNGs under ``<EMBER_HOME>/datasets/digits``
with a fixed ``train/`` and ``val/`` split.

Models (``model.arch``): ``small_cnn`` (the built-in ``digits-cnn``, random init),
``resnet18``, ``mobilenet_v3_small`` and ``efficientnet_b0`` (torchvision, random
init or a local state_dict file in ``model.path``: .pt/.pth/.bin or .safetensors).
The classification head is always replaced to fit the dataset's classes.
torch and torchvision are imported inside functions only.
"""

from __future__ import annotations

import functools
import io
import os
import random
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks.base import InputError, Issue, TaskData

if TYPE_CHECKING:
    import torch

    from engine.train_spec import TrainSpec

HAS_TOKENS = False

ARCHS = ("small_cnn", "resnet18", "mobilenet_v3_small", "efficientnet_b0")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")
BUILTIN_MODEL = "digits-cnn"
BUILTIN_DATA = "digits"
# ImageNet statistics: what torchvision's pretrained weights expect.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# The classification head of each architecture: replaced for the dataset's classes,
# trained in full under LoRA (modules_to_save).
HEADS = {"small_cnn": "head", "resnet18": "fc", "mobilenet_v3_small": "classifier.3",
         "efficientnet_b0": "classifier.1"}
_CACHE_BYTES = 64 << 20  # decoded images are kept in memory when the dataset fits this

FOLDER_HINT = "point data.path at a folder with one subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg"
ARCH_HINT = "use one of: " + ", ".join(ARCHS)


# ---------------------------------------------------------------- data: files


def _scan(folder: Path) -> tuple[dict[str, list[Path]], list[Path]]:
    """Class name -> sorted image files, and the files skipped for their type."""
    classes: dict[str, list[Path]] = {}
    skipped: list[Path] = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = []
        for path in sorted(sub.rglob("*")):
            if not path.is_file() or any(part.startswith(".") for part in path.relative_to(sub).parts):
                continue
            (files if path.suffix.lower() in IMAGE_SUFFIXES else skipped).append(path)
        classes[sub.name] = files
    return classes, skipped


def _open_rgb(path: Path, size: int | None = None):
    """Decode one image fully as RGB (alpha composited over white), optionally resized."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        if size and im.format == "JPEG":
            im.draft("RGB", (size, size))  # decode at a reduced scale: much faster for large photos
        im.load()
        im = ImageOps.exif_transpose(im)
        if im.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
            im = im.point(lambda v: v * (1 / 256)).convert("L") if im.mode != "F" else im.convert("L")
        if im.mode == "P" and "transparency" in im.info:
            im = im.convert("RGBA")
        if im.mode in ("RGBA", "LA", "PA"):
            rgba = im.convert("RGBA")
            im = Image.new("RGB", rgba.size, (255, 255, 255))
            im.paste(rgba, mask=rgba.getchannel("A"))
        rgb = im.convert("RGB")
    if size and rgb.size != (size, size):
        rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
    return rgb


def _unreadable(paths: list[Path], size: int) -> list[tuple[Path, str]]:
    def check(path: Path) -> tuple[Path, str] | None:
        try:
            _open_rgb(path, size)
        except Exception as exc:  # noqa: BLE001 - any decoder failure means the same to the user
            return path, f"{type(exc).__name__}: {exc}"
        return None

    if not paths:
        return []
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        return [r for r in pool.map(check, paths) if r]


def _data_folders(spec: TrainSpec) -> tuple[Path | None, Path | None, list[Issue]]:
    """The train folder and the optional val folder the spec means."""
    data = spec.data
    if data.builtin is not None or data.path is None:
        name = data.builtin or BUILTIN_DATA
        if name != BUILTIN_DATA:
            return None, None, [Issue(f'unknown built-in image dataset "{name}"',
                                      f'use "{BUILTIN_DATA}", or set data.path instead ({FOLDER_HINT})')]
        root = ensure_digits()
        return root / "train", root / "val", []
    train = Path(data.path).expanduser()
    val = Path(data.val_path).expanduser() if data.val_path else None
    return train, val, []


def _check_folder(folder: Path, role: str, spec: TrainSpec) -> tuple[dict[str, list[Path]], list[Issue]]:
    """Classes of one folder and every problem with it (missing, empty, small classes, bad files)."""
    key = "data.path" if role == "training" else "data.val_path"
    if not folder.exists():
        return {}, [Issue(f"{role} image folder not found", f"check {key}; {FOLDER_HINT}", str(folder))]
    if not folder.is_dir():
        return {}, [Issue(f"{role} data must be a folder of class subfolders, not a file", FOLDER_HINT, str(folder))]
    classes, skipped = _scan(folder)
    issues: list[Issue] = []
    usable = sum(len(v) for v in classes.values())
    if not classes:
        loose = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
        found = f" ({len(loose)} images lie directly in it)" if loose else ""
        issues.append(Issue(f"no class subfolders in the {role} folder{found}", FOLDER_HINT, str(folder)))
        return classes, issues
    if usable == 0:
        note = f"; {len(skipped)} other files were ignored (e.g. {skipped[0].name})" if skipped else ""
        issues.append(Issue(f"no PNG or JPEG images in the {role} folder{note}",
                            "put .png, .jpg or .jpeg files in the class subfolders", str(folder)))
        return classes, issues
    if role == "training":
        if len(classes) < 2:
            issues.append(Issue(f'only one class ("{next(iter(classes))}") in the training folder',
                                "a classifier needs at least two class subfolders", str(folder)))
        for name, files in classes.items():
            if len(files) < spec.data.min_per_class:
                issues.append(Issue(
                    f'class "{name}" has {len(files)} image{"s" if len(files) != 1 else ""}, '
                    f"fewer than data.min_per_class ({spec.data.min_per_class})",
                    "add images to this class, remove its folder, or lower data.min_per_class",
                    str(folder / name)))
    for path, why in _unreadable([p for files in classes.values() for p in files], spec.data.image_size):
        issues.append(Issue(f"unreadable image ({why})", "replace or delete this file", str(path)))
    return classes, issues


def _check_data(spec: TrainSpec) -> tuple[dict[str, list[Path]], dict[str, list[Path]] | None, list[Issue]]:
    train_dir, val_dir, issues = _data_folders(spec)
    if train_dir is None:
        return {}, None, issues
    train, issues = _check_folder(train_dir, "training", spec)
    val = None
    if val_dir is not None:
        val, val_issues = _check_folder(val_dir, "validation", spec)
        issues += val_issues
        for name in val:
            if train and name not in train:
                issues.append(Issue(f'validation class "{name}" is not among the training classes',
                                    f"training classes are: {', '.join(sorted(train))}; rename or remove this folder",
                                    str(val_dir / name)))
    return train, val, issues


def _split(classes: dict[str, list[Path]], fraction: float, seed: int) -> tuple[dict, dict]:
    """Seeded stratified split: each class keeps at least one training image."""
    rng = random.Random(seed)
    train, val = {}, {}
    for name in sorted(classes):
        files = list(classes[name])
        rng.shuffle(files)
        n_val = min(max(round(len(files) * fraction), 1 if len(files) >= 2 else 0), len(files) - 1)
        val[name], train[name] = sorted(files[:n_val]), sorted(files[n_val:])
    return train, val


# ---------------------------------------------------------------- data: built-in digits


def _build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """Create ``final`` with ``build(tmp)`` in a sibling temp dir, then rename: safe for racing ranks."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # someone else won the race if it is there now
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_digits(root: Path) -> None:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.RandomState(0)
    for label in range(10):
        idx = np.flatnonzero(digits.target == label)
        rng.shuffle(idx)
        n_val = round(len(idx) * 0.2)
        for part, chosen in (("val", idx[:n_val]), ("train", idx[n_val:])):
            folder = root / part / str(label)
            folder.mkdir(parents=True)
            for i in sorted(chosen):
                pixels = np.clip(digits.images[i] * (255 / 16), 0, 255).round().astype(np.uint8)
                img = Image.fromarray(pixels, mode="L").resize((32, 32), Image.Resampling.BILINEAR)
                img.save(folder / f"{i:04d}.png", optimize=False)
    (root / "README.txt").write_text(
        "scikit-learn load_digits (UCI optical recognition of handwritten digits, 1,797 8x8 scans),\n"
        "rendered by Ember Studio as 32x32 grayscale PNGs. Fixed split: 20% of each digit in val/ (seed 0).\n",
        encoding="utf-8")


def ensure_digits() -> Path:
    """The built-in digits image folder (``train/<digit>/*.png``, ``val/<digit>/*.png``), made on first use."""
    from engine.paths import data_home

    return _build_once(data_home() / "datasets" / "digits", _write_digits)


# ---------------------------------------------------------------- data: datasets


class ImageFiles:
    """Map-style dataset of (path, label) pairs -> {"pixel_values", "labels"}; torch-free to pickle."""

    def __init__(self, items: list[tuple[Path, int]], size: int, transform: Any, cache: bool):
        self.items, self.size, self.transform = items, size, transform
        self._cache: dict[int, Any] | None = {} if cache else None

    def __len__(self) -> int:
        return len(self.items)

    def image(self, i: int):
        if self._cache is not None and i in self._cache:
            return self._cache[i]
        img = _open_rgb(self.items[i][0], self.size)
        if self._cache is not None:
            self._cache[i] = img
        return img

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"pixel_values": self.transform(self.image(i)), "labels": self.items[i][1]}


def collate(examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    import torch

    return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]),
            "labels": torch.tensor([e["labels"] for e in examples], dtype=torch.long)}


def _augment_steps(spec: TrainSpec) -> list:
    """The random PIL-level augmentations for training images (empty when none are on)."""
    from torchvision.transforms import v2

    aug, size = spec.data.augment, spec.data.image_size
    steps: list = []
    if aug.random_resized_crop:
        steps.append(v2.RandomResizedCrop(size, scale=(aug.crop_scale_min, 1.0), antialias=True))
    if aug.horizontal_flip:
        steps.append(v2.RandomHorizontalFlip())
    if aug.color_jitter > 0:
        j = aug.color_jitter
        steps.append(v2.ColorJitter(brightness=j, contrast=j, saturation=j))
    return steps


def build_transform(spec: TrainSpec, train: bool):
    """PIL image (already resized) -> float tensor, with the augmentations when ``train``."""
    import torch
    from torchvision.transforms import v2

    steps = _augment_steps(spec) if train else []
    steps += [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)]
    if spec.data.augment.normalize:
        steps.append(v2.Normalize(MEAN, STD))
    return v2.Compose(steps)


def validate(spec: TrainSpec) -> list[Issue]:
    """Every problem with the model settings and the image folders, each with its path."""
    issues = _check_model(spec)
    issues += _check_data(spec)[2]
    return issues


def load_data(spec: TrainSpec) -> TaskData:
    train_classes, val_classes, issues = _check_data(spec)
    if issues:
        raise InputError(issues)
    names = sorted(train_classes)
    if val_classes is None:
        train_classes, val_classes = _split(train_classes, spec.data.val_fraction, spec.seed)
    index = {n: i for i, n in enumerate(names)}
    train_items = [(p, index[n]) for n in names for p in train_classes[n]]
    val_items = [(p, index[n]) for n in sorted(val_classes) for p in val_classes[n]]
    size = spec.data.image_size
    cache = (len(train_items) + len(val_items)) * size * size * 3 <= _CACHE_BYTES
    train_dir, val_dir, _ = _data_folders(spec)
    info = {
        "num_labels": len(names),
        "label_names": names,
        "train_counts": {n: len(train_classes[n]) for n in names},
        "val_counts": {n: len(val_classes.get(n, [])) for n in names},
        "train_size": len(train_items),
        "val_size": len(val_items),
        "image_size": size,
        "mean": list(MEAN) if spec.data.augment.normalize else None,
        "std": list(STD) if spec.data.augment.normalize else None,
        "train_dir": str(train_dir),
        "val_dir": str(val_dir) if val_dir else None,  # None: split from the training folder
    }
    return TaskData(train=ImageFiles(train_items, size, build_transform(spec, True), cache),
                    val=ImageFiles(val_items, size, build_transform(spec, False), cache),
                    collate=collate, info=info)


def preview_augmentations(spec: TrainSpec, n: int = 8, seed: int = 0) -> list[tuple[str, bytes]]:
    """``n`` augmented training images as (class name, PNG bytes), spread over the classes."""
    import torch
    from torchvision.transforms import v2

    classes, _, issues = _check_data(spec)
    if issues:
        raise InputError(issues)
    names = sorted(classes)
    rng = random.Random(seed)
    picks = []
    for k in range(n):
        name = names[k % len(names)]
        picks.append((name, rng.choice(classes[name])))
    steps = _augment_steps(spec)
    augment = v2.Compose(steps) if steps else (lambda img: img)
    out = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name, path in picks:
            img = augment(_open_rgb(path, spec.data.image_size))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            out.append((name, buf.getvalue()))
    return out


# ---------------------------------------------------------------- models


_CLASSES: dict[str, type] = {}
_CLASSES_LOCK = threading.Lock()


def _small_cnn_classes() -> dict[str, type]:
    """Define ConvBlock and SmallCNN on first use (torch is imported lazily).

    Module ``__getattr__`` exposes them as ``engine.tasks.image_classification.SmallCNN``,
    so pickling and ``torch.save(model)`` find them like any module-level class.
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
        return _small_cnn_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _arch(spec: TrainSpec) -> str:
    return spec.model.arch or "small_cnn"


def _new_model(arch: str, num_labels: int) -> torch.nn.Module:
    if arch == "small_cnn":
        return _small_cnn_classes()["SmallCNN"](num_labels)
    import torchvision

    return getattr(torchvision.models, arch)(weights=None, num_classes=num_labels)


def _check_model(spec: TrainSpec) -> list[Issue]:
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
                _fit(_read_state_dict(path), m.arch, path, _arch_shapes(m.arch))
            except InputError as exc:
                issues += exc.issues
    return issues


STATE_DICT_HINT = ("save the weights with torch.save(model.state_dict(), path) or as .safetensors; "
                   "if the file was damaged in transfer, copy or export it again")


def _read_state_dict(path: Path) -> dict[str, Any]:
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
def _arch_shapes(arch: str) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of the architecture's state_dict (a 2-class head), built once per process."""
    return {k: tuple(v.shape) for k, v in _new_model(arch, 2).state_dict().items()}


def _guess_arch(keys: set[str]) -> str | None:
    for arch in ARCHS:
        own = set(_arch_shapes(arch))
        if len(own & keys) >= 0.9 * len(own):
            return arch
    return None


def _fit(sd: dict[str, Any], arch: str, path: Path, own: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The tensors of ``sd`` to load into a model with these shapes; the file's head only if it fits."""
    head = HEADS[arch] + "."
    body = {k: v for k, v in sd.items() if not (k.startswith(head) and own.get(k) != tuple(v.shape))}
    unexpected = sorted(k for k in body if k not in own)
    wrong = sorted(k for k in body if k in own and own[k] != tuple(body[k].shape))
    missing = sorted(k for k in own if k not in body and not k.startswith(head))
    if unexpected or wrong or missing:
        guess = _guess_arch(set(sd))
        example = (wrong or missing or unexpected)[0]
        what = "wrongly shaped" if wrong else "missing" if missing else "unexpected"
        fix = (f"the file looks like {guess}: set model.arch to {guess}" if guess and guess != arch else
               f"use a state_dict saved from torchvision's {arch} (or a model fine-tuned from it)")
        raise InputError([Issue(
            f"the weights do not fit {arch}: {len(missing)} tensors missing, {len(unexpected)} unexpected, "
            f"{len(wrong)} of the wrong shape (first {what}: {example})", fix, str(path))])
    return body


def build_model(spec: TrainSpec, data: TaskData) -> torch.nn.Module:
    issues = _check_model(spec)
    if issues:
        raise InputError(issues)
    arch = _arch(spec)
    model = _new_model(arch, int(data.info["num_labels"]))
    if spec.model.path and spec.model.builtin is None:
        path = Path(spec.model.path).expanduser()
        own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        model.load_state_dict(_fit(_read_state_dict(path), arch, path, own), strict=False)
    return model.float()


# ---------------------------------------------------------------- steps and metrics


def forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    import torch.nn.functional as F

    logits = model(batch["pixel_values"])
    loss = F.cross_entropy(logits.float(), batch["labels"])
    return loss, {"samples": float(batch["labels"].shape[0])}


def eval_sums(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """loss_sum, correct, count, and correct_c<i>/count_c<i> for every class i (same keys on every rank)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits = model(batch["pixel_values"]).float()
        labels = batch["labels"]
        k = logits.shape[1]
        loss_sum = F.cross_entropy(logits, labels, reduction="sum")
        hit = logits.argmax(1) == labels
        per_count = torch.bincount(labels, minlength=k)
        per_correct = torch.bincount(labels[hit], minlength=k)
        values = torch.cat([torch.stack([loss_sum, hit.sum().float(), torch.tensor(float(labels.numel()),
                                                                                  device=logits.device)]),
                            per_correct.float(), per_count.float()]).tolist()
    sums = {"loss_sum": values[0], "correct": values[1], "count": values[2]}
    for i in range(k):
        sums[f"correct_c{i}"] = values[3 + i]
        sums[f"count_c{i}"] = values[3 + k + i]
    return sums


def finalize_metrics(sums: dict[str, float]) -> dict[str, float]:
    """accuracy, loss, balanced_accuracy (mean per-class recall) and accuracy_c<i> per class."""
    count = sums.get("count", 0.0)
    if not count:
        return {"accuracy": float("nan"), "loss": float("nan")}
    metrics = {"accuracy": sums["correct"] / count, "loss": sums["loss_sum"] / count}
    per_class = {}
    i = 0
    while f"count_c{i}" in sums:
        if sums[f"count_c{i}"]:
            per_class[f"accuracy_c{i}"] = sums[f"correct_c{i}"] / sums[f"count_c{i}"]
        i += 1
    if per_class:
        metrics["balanced_accuracy"] = sum(per_class.values()) / len(per_class)
        metrics.update(per_class)
    return metrics


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
