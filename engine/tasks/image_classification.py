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
The classification head is always replaced to fit the dataset's classes; building
models and reading weights files is ``engine.tasks.image_models``.
torch and torchvision are imported inside functions only.
"""

from __future__ import annotations

import io
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.tasks import image_models
from engine.tasks.base import InputError, Issue, TaskData, build_once
from engine.tasks.image_models import block_types as block_types  # re-exported: the Task protocol
from engine.tasks.image_models import head_modules as head_modules
from engine.tasks.image_models import lora_targets as lora_targets

if TYPE_CHECKING:
    import torch

    from engine.api.train_spec import TrainSpec

HAS_TOKENS = False

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
BUILTIN_DATA = "digits"
# ImageNet statistics: what torchvision's pretrained weights expect.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
_CACHE_BYTES = 64 << 20  # decoded images are kept in memory when the dataset fits this

FOLDER_HINT = "point data.path at a folder with one subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg"


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


def open_rgb(path: Path, size: int | None = None):
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
            open_rgb(path, size)
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
    from engine.tasks.safe_archive import dataset_path
    from engine.training.context import JobFailed

    try:  # a .zip/.tar.gz image folder is unpacked safely first (engine/tasks/safe_archive.py)
        path, val_path = dataset_path(data.path), dataset_path(data.val_path)
    except JobFailed as exc:
        return None, None, [Issue(str(exc), exc.hint, data.path)]
    train = Path(path).expanduser()
    val = Path(val_path).expanduser() if val_path else None
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


def check_data(spec: TrainSpec) -> tuple[dict[str, list[Path]], dict[str, list[Path]] | None, list[Issue]]:
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


def split_classes(classes: dict[str, list[Path]], fraction: float, seed: int) -> tuple[dict, dict]:
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


def write_digits(root: Path) -> None:
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
    from engine.api.paths import data_home

    return build_once(data_home() / "datasets" / "digits", write_digits)


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
        img = open_rgb(self.items[i][0], self.size)
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
    issues = image_models.check(spec)
    issues += check_data(spec)[2]
    return issues


def load_data(spec: TrainSpec) -> TaskData:
    train_classes, val_classes, issues = check_data(spec)
    if issues:
        raise InputError(issues)
    names = sorted(train_classes)
    if val_classes is None:
        train_classes, val_classes = split_classes(train_classes, spec.data.val_fraction, spec.seed)
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

    classes, _, issues = check_data(spec)
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
            img = augment(open_rgb(path, spec.data.image_size))
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            out.append((name, buf.getvalue()))
    return out


# ---------------------------------------------------------------- models


def build_model(spec: TrainSpec, data: TaskData) -> torch.nn.Module:
    if spec.model.code:  # the user's own model file (confirmed, re-verified there): engine/tasks/custom_model.py
        from engine.tasks import custom_model

        return custom_model.build(spec, data)
    return image_models.build(spec, int(data.info["num_labels"]))


def __getattr__(name: str) -> Any:
    if name in ("ConvBlock", "SmallCNN"):  # where they lived before engine.tasks.image_models
        return image_models.small_cnn_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
