"""The image classification task with real image files, the real digits scans and torchvision models."""

from __future__ import annotations

import io
import pickle
import threading
import time
from pathlib import Path

import pytest

from engine.api.train_spec import TrainSpec
from engine.tasks import image_classification as ic
from engine.tasks.base import InputError, Issue, TaskData, build_once

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def digits_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One rendered digits folder (1,797 files) for the whole module."""
    home = tmp_path_factory.mktemp("digits-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_HOME", str(home))
        ic.ensure_digits()
    return home


@pytest.fixture
def one_thread():
    # Two OpenMP threads on a busy 2-core machine can be 10x slower than one.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def spec_for(model: dict | None = None, **data) -> TrainSpec:
    return TrainSpec(task="image_classification", data=data, model=model or {})


def write_image(path: Path, color=(200, 30, 30), size=(20, 14), mode="RGB", fmt=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.new("RGB", size, color).convert(mode)
    img.save(path, format=fmt)
    return path


def image_folder(root: Path, classes: dict[str, int]) -> Path:
    for i, (name, count) in enumerate(classes.items()):
        for k in range(count):
            write_image(root / name / f"{k}.png", color=(40 * i, 255 - 40 * i, 10 * k))
    return root


def messages(issues: list[Issue]) -> list[str]:
    return [str(i) for i in issues]


# ---------------------------------------------------------------- built-in digits


def test_digits_are_rendered_once_with_a_fixed_split(digits_home, monkeypatch):
    monkeypatch.setenv("EMBER_HOME", str(digits_home))
    root = ic.ensure_digits()
    assert root == digits_home / "datasets" / "digits"
    train = {d.name: len(list(d.glob("*.png"))) for d in (root / "train").iterdir()}
    val = {d.name: len(list(d.glob("*.png"))) for d in (root / "val").iterdir()}
    assert sorted(train) == sorted(val) == [str(i) for i in range(10)]
    assert sum(train.values()) + sum(val.values()) == 1797
    assert sum(val.values()) == 359
    with Image.open(next((root / "train" / "3").glob("*.png"))) as im:
        assert im.size == (32, 32) and im.mode == "L"
    stamp = (root / "README.txt").stat().st_mtime_ns
    assert ic.ensure_digits() == root and (root / "README.txt").stat().st_mtime_ns == stamp
    assert [p.name for p in root.parent.iterdir()] == ["digits"]  # no temp dirs left behind


def test_build_once_is_safe_when_ranks_race(tmp_path):
    final = tmp_path / "data" / "thing"
    barrier = threading.Barrier(4)
    built = []

    def build(tmp: Path) -> None:
        barrier.wait()  # everyone builds at the same time
        (tmp / "payload.txt").write_text(threading.current_thread().name)
        time.sleep(0.05)
        built.append(tmp)

    results, errors = [], []

    def worker():
        try:
            results.append(build_once(final, build))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, name=f"rank{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [final] * 4 and len(built) == 4
    assert (final / "payload.txt").read_text().startswith("rank")
    assert [p.name for p in final.parent.iterdir()] == ["thing"]


def test_small_cnn_learns_digits_above_90_percent(digits_home, monkeypatch, one_thread):
    monkeypatch.setenv("EMBER_HOME", str(digits_home))
    spec = TrainSpec(task="image_classification", batch_size=32, seed=0)
    assert ic.validate(spec) == []
    data = ic.load_data(spec)
    assert (data.info["num_labels"], data.info["train_size"], data.info["val_size"]) == (10, 1438, 359)
    assert data.info["label_names"] == [str(i) for i in range(10)]
    torch.manual_seed(0)
    model = ic.build_model(spec, data)
    assert type(model).__name__ == "SmallCNN"
    loader = torch.utils.data.DataLoader(data.train, batch_size=32, shuffle=True, drop_last=True,
                                         collate_fn=data.collate, generator=torch.Generator().manual_seed(0))
    steps, lr = 300, 3e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    start, step = time.monotonic(), 0
    model.train()
    while step < steps:
        for batch in loader:
            loss, stats = ic.forward(model, batch)
            assert stats == {"samples": 32.0}
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step == steps:
                break
    train_s = time.monotonic() - start
    model.eval()
    sums: dict[str, float] = {}
    for batch in torch.utils.data.DataLoader(data.val, batch_size=128, collate_fn=data.collate):
        for k, v in ic.eval_sums(model, batch).items():
            sums[k] = sums.get(k, 0.0) + v
    metrics = ic.finalize_metrics(sums)
    assert sums["count"] == 359
    assert metrics["accuracy"] > 0.90, f"{metrics['accuracy']:.4f} after {steps} steps ({train_s:.1f} s)"
    assert metrics["loss"] < 0.5
    assert all(metrics[f"accuracy_c{i}"] > 0.6 for i in range(10))


# ---------------------------------------------------------------- user folders


def test_mixed_sizes_and_modes_become_rgb_at_image_size(tmp_path):
    root = tmp_path / "pets"
    write_image(root / "cat" / "rgba.png", mode="RGBA", size=(50, 20))
    write_image(root / "cat" / "gray.png", mode="L", size=(7, 9))
    write_image(root / "cat" / "palette.png", mode="P", size=(64, 64))
    write_image(root / "dog" / "photo.jpg", size=(120, 80), fmt="JPEG")
    write_image(root / "dog" / "print.jpeg", mode="CMYK", size=(33, 33), fmt="JPEG")
    Image.new("I;16", (10, 10), 40000).save(root / "dog" / "depth.png")
    (root / "dog" / "notes.txt").write_text("ignored: not an image")
    spec = spec_for(path=str(root), image_size=24, val_fraction=0.34, augment={"normalize": False})
    assert ic.validate(spec) == []
    data = ic.load_data(spec)
    assert data.info["label_names"] == ["cat", "dog"]
    assert data.info["train_counts"] == {"cat": 2, "dog": 2} and data.info["val_counts"] == {"cat": 1, "dog": 1}
    for ds in (data.train, data.val):
        for i in range(len(ds)):
            item = ds[i]
            assert item["pixel_values"].shape == (3, 24, 24) and item["pixel_values"].dtype == torch.float32
            assert 0.0 <= float(item["pixel_values"].min()) and float(item["pixel_values"].max()) <= 1.0
    batch = data.collate([data.train[0], data.val[0]])
    assert batch["pixel_values"].shape == (2, 3, 24, 24) and batch["labels"].dtype == torch.long
    # The 16-bit image is scaled, not clipped to white.
    depth = ic.open_rgb(root / "dog" / "depth.png", 8)
    assert depth.mode == "RGB" and depth.getpixel((0, 0)) == (156, 156, 156)
    # Transparent pixels are composited over white.
    Image.new("RGBA", (4, 4), (0, 0, 0, 0)).save(root / "cat" / "clear.png")
    assert ic.open_rgb(root / "cat" / "clear.png", 4).getpixel((1, 1)) == (255, 255, 255)


def test_split_is_stratified_seeded_and_datasets_pickle(tmp_path):
    root = image_folder(tmp_path / "imgs", {"a": 10, "b": 5, "c": 2})
    spec = spec_for(path=str(root), val_fraction=0.2)
    first, again = ic.load_data(spec), ic.load_data(spec)
    assert first.info["val_counts"] == {"a": 2, "b": 1, "c": 1}
    assert first.info["train_counts"] == {"a": 8, "b": 4, "c": 1}
    assert first.val.items == again.val.items
    other = ic.load_data(TrainSpec(task="image_classification", data={"path": str(root)}, seed=1))
    assert other.val.items != first.val.items
    assert not {p for p, _ in first.train.items} & {p for p, _ in first.val.items}
    clone = pickle.loads(pickle.dumps(first.train))  # DataLoader workers get a pickled copy
    assert torch.equal(clone[0]["pixel_values"], first.train[0]["pixel_values"])


def test_separate_validation_folder_uses_training_label_order(tmp_path):
    train = image_folder(tmp_path / "train", {"ant": 3, "bee": 3, "cow": 3})
    val = image_folder(tmp_path / "val", {"cow": 2, "ant": 1})
    data = ic.load_data(spec_for(path=str(train), val_path=str(val)))
    assert data.info["train_size"] == 9 and data.info["val_size"] == 3
    assert sorted(label for _, label in data.val.items) == [0, 2, 2]


def test_augmentations_apply_to_training_images_only(tmp_path):
    root = tmp_path / "imgs"
    for name in ("left", "right"):
        for k in range(3):
            img = Image.new("RGB", (32, 32), (0, 0, 0))
            img.paste((255, 255, 255), (0, 0, 16, 32) if name == "left" else (16, 0, 32, 32))
            (root / name).mkdir(parents=True, exist_ok=True)
            img.save(root / name / f"{k}.png")
    aug = {"random_resized_crop": True, "crop_scale_min": 0.3, "horizontal_flip": True, "color_jitter": 0.5}
    data = ic.load_data(spec_for(path=str(root), augment=aug))
    torch.manual_seed(0)
    train_views = [data.train[0]["pixel_values"] for _ in range(6)]
    val_views = [data.val[0]["pixel_values"] for _ in range(3)]
    assert any(not torch.equal(train_views[0], v) for v in train_views[1:])
    assert all(torch.equal(val_views[0], v) for v in val_views[1:])
    # Normalized with the ImageNet statistics: a white pixel is (1 - mean) / std.
    white = (1 - ic.MEAN[0]) / ic.STD[0]
    assert float(val_views[0][0].max()) == pytest.approx(white, abs=1e-5)


def test_preview_augmentations_gives_png_samples(tmp_path):
    root = image_folder(tmp_path / "imgs", {"red": 4, "blue": 4})
    spec = spec_for(path=str(root), image_size=40,
                    augment={"random_resized_crop": True, "horizontal_flip": True, "color_jitter": 0.4})
    samples = ic.preview_augmentations(spec, n=5, seed=3)
    assert [label for label, _ in samples] == ["blue", "red", "blue", "red", "blue"]
    for _, png in samples:
        assert png.startswith(b"\x89PNG")
        with Image.open(io.BytesIO(png)) as im:
            assert im.size == (40, 40) and im.mode == "RGB"
    assert ic.preview_augmentations(spec, n=5, seed=3) == samples
    assert ic.preview_augmentations(spec, n=5, seed=4) != samples
    with pytest.raises(InputError):
        ic.preview_augmentations(spec_for(path=str(tmp_path / "missing")))


def test_preview_of_the_builtin_digits(digits_home, monkeypatch):
    monkeypatch.setenv("EMBER_HOME", str(digits_home))
    samples = ic.preview_augmentations(spec_for(augment={"random_resized_crop": True}), n=10)
    assert [label for label, _ in samples] == [str(i) for i in range(10)]


# ---------------------------------------------------------------- bad input, exact messages


def test_missing_folder_and_file_instead_of_folder(tmp_path):
    missing = tmp_path / "nowhere"
    assert messages(ic.validate(spec_for(path=str(missing)))) == [
        f"{missing}: training image folder not found (check data.path; point data.path at a folder with one "
        "subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg)"]
    a_file = write_image(tmp_path / "one.png")
    assert messages(ic.validate(spec_for(path=str(a_file)))) == [
        f"{a_file}: training data must be a folder of class subfolders, not a file (point data.path at a folder "
        "with one subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg)"]
    train = image_folder(tmp_path / "train", {"a": 2, "b": 2})
    assert messages(ic.validate(spec_for(path=str(train), val_path=str(tmp_path / "val")))) == [
        f"{tmp_path / 'val'}: validation image folder not found (check data.val_path; point data.path at a folder "
        "with one subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg)"]


def test_no_class_subfolders(tmp_path):
    flat = tmp_path / "flat"
    write_image(flat / "1.png")
    write_image(flat / "2.png")
    assert messages(ic.validate(spec_for(path=str(flat)))) == [
        f"{flat}: no class subfolders in the training folder (2 images lie directly in it) (point data.path at a "
        "folder with one subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg)"]


def test_unsupported_files_are_noted_only_when_nothing_usable_remains(tmp_path):
    root = tmp_path / "docs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "notes.txt").write_text("x")
    (root / "b").mkdir()
    write_image(root / "b" / "pic.gif", fmt="GIF")
    assert messages(ic.validate(spec_for(path=str(root)))) == [
        f"{root}: no PNG or JPEG images in the training folder; 2 other files were ignored (e.g. notes.txt) "
        "(put .png, .jpg or .jpeg files in the class subfolders)"]
    write_image(root / "a" / "1.png")
    write_image(root / "a" / "2.png")
    write_image(root / "b" / "1.png")
    write_image(root / "b" / "2.jpg", fmt="JPEG")
    assert ic.validate(spec_for(path=str(root))) == []


def test_small_classes_and_a_single_class(tmp_path):
    root = image_folder(tmp_path / "imgs", {"big": 6, "tiny": 1, "none": 0})
    (root / "none").mkdir(exist_ok=True)
    assert messages(ic.validate(spec_for(path=str(root), min_per_class=2))) == [
        f'{root / "none"}: class "none" has 0 images, fewer than data.min_per_class (2) '
        "(add images to this class, remove its folder, or lower data.min_per_class)",
        f'{root / "tiny"}: class "tiny" has 1 image, fewer than data.min_per_class (2) '
        "(add images to this class, remove its folder, or lower data.min_per_class)"]
    single = image_folder(tmp_path / "single", {"only": 3})
    assert messages(ic.validate(spec_for(path=str(single)))) == [
        f'{single}: only one class ("only") in the training folder (a classifier needs at least two class subfolders)']


def test_every_unreadable_image_is_listed(tmp_path):
    root = image_folder(tmp_path / "imgs", {"a": 3, "b": 3})
    (root / "a" / "empty.png").write_bytes(b"")
    (root / "b" / "text.jpg").write_text("this is not a jpeg")
    good = (root / "a" / "0.png").read_bytes()
    (root / "b" / "cut.png").write_bytes(good[: len(good) // 2])
    issues = ic.validate(spec_for(path=str(root)))
    assert [(i.file, i.hint) for i in issues] == [
        (str(root / "a" / "empty.png"), "replace or delete this file"),
        (str(root / "b" / "cut.png"), "replace or delete this file"),
        (str(root / "b" / "text.jpg"), "replace or delete this file")]
    assert issues[0].message == (f"unreadable image (UnidentifiedImageError: cannot identify image file "
                                 f"'{root / 'a' / 'empty.png'}')")
    assert all(i.message.startswith("unreadable image (") for i in issues)
    with pytest.raises(InputError) as exc:
        ic.load_data(spec_for(path=str(root)))
    assert exc.value.issues == issues


def test_validation_classes_must_exist_in_training(tmp_path):
    train = image_folder(tmp_path / "train", {"cat": 2, "dog": 2})
    val = image_folder(tmp_path / "val", {"cat": 1, "fox": 1})
    assert messages(ic.validate(spec_for(path=str(train), val_path=str(val)))) == [
        f'{val / "fox"}: validation class "fox" is not among the training classes '
        "(training classes are: cat, dog; rename or remove this folder)"]


def test_unknown_builtins_and_arch():
    issues = ic.validate(TrainSpec(task="image_classification", model={"builtin": "huge-vit", "arch": "vgg16"},
                                   data={"builtin": "cifar"}))
    assert messages(issues) == [
        'unknown built-in image model "huge-vit" (use "digits-cnn", or set model.arch (and model.path for a '
        'weights file))',
        'unknown model.arch "vgg16" (use one of: small_cnn, resnet18, mobilenet_v3_small, efficientnet_b0)',
        'unknown built-in image dataset "cifar" (use "digits", or set data.path instead (point data.path at a '
        'folder with one subfolder per class, e.g. pets/cat/1.png, pets/dog/2.jpg))']


# ---------------------------------------------------------------- models and weights files


DATA5 = TaskData(train=None, val=None, collate=None, info={"num_labels": 5})


@pytest.mark.parametrize(("arch", "block", "head"), [
    ("small_cnn", "ConvBlock", "head"),
    ("resnet18", "BasicBlock", "fc"),
    ("mobilenet_v3_small", "InvertedResidual", "classifier.3"),
    ("efficientnet_b0", "MBConv", "classifier.1"),
])
def test_architectures_blocks_lora_targets_and_heads(arch, block, head, one_thread):
    peft = pytest.importorskip("peft")
    model = ic.build_model(spec_for(model={"arch": arch}), DATA5)
    assert [c.__name__ for c in ic.block_types(model)] == [block]
    assert ic.head_modules(model) == [head]
    targets = ic.lora_targets(model)
    modules = dict(model.named_modules())
    assert targets and all(modules[t].__class__.__name__ in ("Conv2d", "Linear") for t in targets)
    assert all(getattr(modules[t], "groups", 1) == 1 for t in targets) and head not in targets
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                         modules_to_save=[head]))
    loss, stats = ic.forward(wrapped, {"pixel_values": torch.randn(2, 3, 32, 32), "labels": torch.tensor([0, 4])})
    loss.backward()
    assert stats == {"samples": 2.0} and torch.isfinite(loss)
    trainable = {n for n, p in wrapped.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any(head.split(".")[0] in n and "modules_to_save" in n
                                                         for n in trainable)


def test_local_weights_replace_the_head_and_keep_the_body(tmp_path, one_thread):
    import torchvision

    imagenet = torchvision.models.resnet18(weights=None)  # a 1000-class head, like a downloaded checkpoint
    path = tmp_path / "resnet18.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in imagenet.state_dict().items()}}, path)
    spec = spec_for(model={"arch": "resnet18", "path": str(path)})
    assert ic.validate(spec) == []
    model = ic.build_model(spec, DATA5)
    assert model.fc.out_features == 5
    assert torch.equal(model.layer3[1].conv2.weight, imagenet.layer3[1].conv2.weight)
    from safetensors.torch import save_file

    tuned = torchvision.models.resnet18(num_classes=5)
    save_file(tuned.state_dict(), tmp_path / "tuned.safetensors")
    model = ic.build_model(spec_for(model={"arch": "resnet18", "path": str(tmp_path / "tuned.safetensors")}), DATA5)
    assert torch.equal(model.fc.weight, tuned.fc.weight)  # a head that fits is kept


def test_bad_weights_files_name_the_file_and_the_fix(tmp_path, one_thread):
    import torchvision

    fix = ("save the weights with torch.save(model.state_dict(), path) or as .safetensors; "
           "if the file was damaged in transfer, copy or export it again")

    images = image_folder(tmp_path / "images", {"a": 2, "b": 2})

    def problems(path: Path, arch: str | None = "resnet18") -> list[str]:
        spec = spec_for(model={"arch": arch, "path": str(path)}, path=str(images))
        found = messages(ic.validate(spec))
        if found and arch:
            with pytest.raises(InputError) as exc:
                ic.build_model(spec, DATA5)
            assert messages(exc.value.issues) == found
        return found

    missing = tmp_path / "missing.pt"
    assert problems(missing) == [f"{missing}: weights file not found (check model.path)"]
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not weights at all")
    assert problems(garbage) == [
        f"{garbage}: not a PyTorch weights file: it is neither a torch.save archive nor a pickle ({fix})"]
    sd = torchvision.models.resnet18(num_classes=5).state_dict()
    torch.save(sd, tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    assert problems(cut) == [
        f"{cut}: the weights file is damaged or incomplete (PytorchStreamReader failed reading zip archive: "
        f"failed finding central directory) ({fix})"]
    whole = tmp_path / "whole.pt"
    torch.save(torchvision.models.resnet18(num_classes=5), whole)
    assert problems(whole) == [
        f"{whole}: the file holds pickled Python objects (for example a whole model), not only tensors; "
        f"Ember loads state_dicts only, never code from a weights file ({fix})"]
    bad_st = tmp_path / "bad.safetensors"
    bad_st.write_bytes(b"xx")
    assert problems(bad_st) == [
        f"{bad_st}: the .safetensors file is damaged or incomplete (Error while deserializing header: "
        f"header too small) ({fix})"]
    assert problems(tmp_path / "good.pt", arch="mobilenet_v3_small") == [
        f"{tmp_path / 'good.pt'}: the weights do not fit mobilenet_v3_small: 242 tensors missing, 122 unexpected, "
        "0 of the wrong shape (first missing: classifier.0.bias) (the file looks like resnet18: set model.arch "
        "to resnet18)"]
    assert problems(tmp_path / "good.pt", arch=None) == [
        f"{tmp_path / 'good.pt'}: model.path needs model.arch (set model.arch to the architecture the weights were "
        "saved from (small_cnn, resnet18, mobilenet_v3_small, efficientnet_b0))"]
    (tmp_path / "weights.onnx").write_bytes(b"x")
    assert problems(tmp_path / "weights.onnx") == [
        f'{tmp_path / "weights.onnx"}: unsupported weights file type ".onnx" (use a state_dict saved as .pt/.pth '
        "(torch.save) or .safetensors)"]
    assert problems(tmp_path) == [
        f"{tmp_path}: model.path is a folder; image models take one weights file (point model.path at a .pt, "
        ".pth or .safetensors state_dict)"]


def test_small_cnn_pickles_like_a_module_level_class():
    model = ic.build_model(TrainSpec(task="image_classification"), DATA5)
    clone = pickle.loads(pickle.dumps(model))
    assert type(clone) is ic.SmallCNN and isinstance(clone.blocks[0], ic.ConvBlock)
    x = torch.randn(1, 3, 32, 32)
    model.eval()
    clone.eval()
    assert torch.equal(model(x), clone(x))


# ---------------------------------------------------------------- metrics


class FixedLogits(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, x):
        return self.logits


def test_eval_sums_and_metrics_per_class():
    logits = torch.tensor([[5.0, 0, 0], [5.0, 0, 0], [0, 5.0, 0], [5.0, 0, 0]])
    labels = torch.tensor([0, 1, 1, 2])
    sums = ic.eval_sums(FixedLogits(logits), {"pixel_values": torch.zeros(4, 3, 8, 8), "labels": labels})
    ce = float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
    assert sums == pytest.approx({"loss_sum": ce, "correct": 2, "count": 4, "correct_c0": 1, "correct_c1": 1,
                                  "correct_c2": 0, "count_c0": 1, "count_c1": 2, "count_c2": 1})
    other = ic.eval_sums(FixedLogits(logits[:1]), {"pixel_values": torch.zeros(1, 3, 8, 8),
                                                   "labels": torch.tensor([0])})
    assert set(other) == set(sums)  # the same keys on every rank, even without every class
    total = {k: sums[k] + other[k] for k in sums}
    metrics = ic.finalize_metrics(total)
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    assert metrics["loss"] == pytest.approx(total["loss_sum"] / 5)
    assert (metrics["accuracy_c0"], metrics["accuracy_c1"], metrics["accuracy_c2"]) == (1.0, 0.5, 0.0)
    assert metrics["balanced_accuracy"] == pytest.approx(0.5)
    assert ic.HAS_TOKENS is False
