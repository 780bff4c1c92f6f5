"""Export formats (engine/export): ONNX, the ONNX Runtime package, TorchScript and torch.export.

The built-in MiniLM text classifier (max_length 32, untrained head) and the digits CNN are
exported once per module; every artifact is loaded in a fresh process and compared with
the model in PyTorch on 32 validation examples (parity.check).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from engine.api.train_spec import TrainSpec
from engine.export import metadata as md
from engine.export import parity
from engine.export.onnx import export_onnx
from engine.export.ort_package import write_ort_package
from engine.export.pt2 import export_pt2
from engine.export.torchscript import export_torchscript
from engine.tasks import get_task
from engine.trainer.source import Source
from engine.training.context import JobFailed

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.timeout(300)

SAMPLES, BATCH, TOLERANCE = 32, 8, 1e-4
FORMATS = ("onnx", "ort", "torchscript", "pt2")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Two threads on a busy 2-core machine are much slower than one; the fresh processes inherit the setting.
    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(before)
    if env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env


def _source(tmp: Path, doc: dict) -> tuple[Source, object, object, Path]:
    spec = TrainSpec.model_validate({"method": {"kind": "full"}, "device": "cpu", **doc})
    task = get_task(spec.task)
    data = task.load_data(spec)
    torch.manual_seed(0)
    model = task.build_model(spec, data).eval()
    run_dir = tmp / "run"
    (run_dir / "model").mkdir(parents=True)
    spec_file = run_dir / "spec.yaml"
    spec_file.write_text(f"kind: train.finetune\nspec: {json.dumps(spec.model_dump(mode='json'))}\n", encoding="utf-8")
    return Source("r-test-" + spec.task, run_dir, {"task": spec.task}, spec, run_dir / "model"), data, model, spec_file


def _export_all(tmp: Path, doc: dict) -> dict:
    """Every format of one model, exported once, with the parity batches and their reference logits."""
    source, data, model, spec_file = _source(tmp, doc)
    task = source.spec.task
    batches = parity.reference_batches(data, task, SAMPLES, BATCH)
    meta = md.model_metadata(source, data, spec_file)
    out = tmp / "export"
    results = {"onnx": export_onnx(model, task, batches[0], out / "onnx" / "model.onnx", metadata=meta)}
    results["ort"] = write_ort_package(out / "onnx" / "model.onnx", out / "ort", task_name=task,
                                       labels=md.labels(data), preprocessing=md.preprocessing(source, data),
                                       tokenizer_dir=md.tokenizer_dir(source))
    results["torchscript"] = export_torchscript(model, task, batches[0], out / "torchscript" / "model.ts")
    results["pt2"] = export_pt2(model, task, batches[0], out / "pt2" / "model.pt2")
    return {"source": source, "data": data, "model": model, "spec_file": spec_file, "meta": meta, "task": task,
            "batches": batches, "reference": parity.reference_logits(model, task, batches), "results": results}


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return _export_all(tmp_path_factory.mktemp("text"),
                       {"task": "text_classification", "data": {"max_length": 32}})


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return _export_all(tmp_path_factory.mktemp("image"), {"task": "image_classification"})


def _run_infer(package: Path, *args: str) -> list[dict]:
    """The package's infer.py as a user runs it: its own folder, no PYTHONPATH, torch and engine unimportable."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-I", "-c", parity.STANDALONE, str(package / "infer.py"), *args],
                          cwd=package, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("which", ["text", "image"])
def test_parity_in_a_fresh_process(which, fmt, request):
    case = request.getfixturevalue(which)
    path = case["results"][fmt]["path"]
    got = parity.check(fmt, path, case["task"], case["batches"], case["reference"], TOLERANCE)
    assert got["samples"] == SAMPLES
    assert got["passed"] and got["enforced"]
    assert got["max_abs_diff"] < TOLERANCE
    assert got["top1_agreement"] == 1.0


def test_text_batches_cover_several_lengths(text):
    # Padding to the longest in each batch gives batches of different widths: a shape baked into an export shows.
    assert len({b["input_ids"].shape[1] for b in text["batches"]}) > 1


def test_parity_fails_on_a_different_model(image):
    other = [r + np.float32(1e-2) for r in image["reference"]]
    with pytest.raises(JobFailed, match="does not match the model") as err:
        parity.check("onnx", image["results"]["onnx"]["path"], image["task"], image["batches"], other, TOLERANCE)
    assert "tolerance" in str(err.value) and "top-1 agreement 1.0000 on 32 examples" in str(err.value)
    assert err.value.hint


def test_onnx_result_and_metadata(text):
    res = text["results"]["onnx"]
    assert res["exporter"] == "dynamo" and res["fallback_reason"] is None and res["opset"] == 18
    assert res["files"] == [res["path"]] and res["bytes"] == Path(res["path"]).stat().st_size
    assert [i["name"] for i in res["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(i["dtype"] == "int64" and i["shape"] == ["batch", "sequence"] for i in res["inputs"])
    assert res["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", 5]}]
    props = {p.key: p.value for p in onnx.load(res["path"]).metadata_props}
    assert props["ember.task"] == "text_classification"
    assert json.loads(props["ember.labels"]) == text["data"].info["label_names"]
    pre = json.loads(props["ember.preprocessing"])
    assert pre["tokenizer"] == "minilm" and pre["max_length"] == 32 and pre["truncation"] is True
    assert props["ember.source_run"] == text["source"].job_id
    import hashlib

    assert props["ember.spec_sha256"] == hashlib.sha256(text["spec_file"].read_bytes()).hexdigest()
    import engine

    assert props["ember.version"] == engine.__version__
    assert not list(Path(res["path"]).parent.glob(".*"))  # no temp folder left beside it


def test_image_metadata(image):
    res = image["results"]["onnx"]
    assert res["inputs"] == [{"name": "pixel_values", "dtype": "float32", "shape": ["batch", 3, 32, 32]}]
    pre = json.loads({p.key: p.value for p in onnx.load(res["path"]).metadata_props}["ember.preprocessing"])
    assert pre["size"] == [32, 32] and pre["channels"] == 3 and len(pre["mean"]) == 3 and len(pre["std"]) == 3


def test_ort_package_files(text, image):
    names = {Path(f).name for f in text["results"]["ort"]["files"]}
    assert {"model.onnx", "infer.py", "labels.json", "preprocess.json", "tokenizer.json", "requirements.txt",
            "README.md"} <= names
    assert "model.safetensors" not in names
    reqs = (Path(text["results"]["ort"]["path"]) / "requirements.txt").read_text()
    # The lowest versions the model and infer.py need (a Python 3.10 target installs them), not this machine's:
    # the dynamo exporter's IR 10 file at opset 18 needs onnxruntime 1.18.
    assert [line for line in reqs.splitlines() if not line.startswith("#")] == [
        "onnxruntime>=1.18", "numpy>=1.24.2", "tokenizers>=0.13.3"]
    assert "Python 3.10 or newer" in reqs and "torch" not in reqs
    image_reqs = (Path(image["results"]["ort"]["path"]) / "requirements.txt").read_text()
    assert "onnxruntime>=1.18\n" in image_reqs and "pillow>=9.3  # only to read image files" in image_reqs
    tree = ast.parse((Path(text["results"]["ort"]["path"]) / "infer.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "argparse", "json", "re", "sys", "pathlib", "numpy", "onnxruntime",
                        "tokenizers", "transformers", "PIL"}
    assert "tokenizer.json" not in {Path(f).name for f in image["results"]["ort"]["files"]}


def test_ort_infer_classifies_real_text(text):
    data = text["data"]
    texts = data.val.texts[:3]
    lines = _run_infer(Path(text["results"]["ort"]["path"]), *texts)
    assert [line["input"] for line in lines] == texts
    labels = data.info["label_names"]
    for i, line in enumerate(lines):
        assert line["label"] in labels
        assert set(line["probabilities"]) == set(labels)
        assert abs(sum(line["probabilities"].values()) - 1) < 1e-4
        # Its own tokenizer gives the model's numbers: the same logits as the task's tokenization in torch.
        batch = {k: v for k, v in data.collate([data.val[i]]).items() if k != "labels"}
        ref = parity.reference_logits(text["model"], text["task"], [batch])[0][0]
        assert np.abs(np.array(line["logits"]) - ref).max() < TOLERANCE


def test_ort_infer_classifies_image_files(image, tmp_path):
    data = image["data"]
    png = data.val.items[0][0]
    npy = tmp_path / "pixels.npy"
    np.save(npy, data.val[1]["pixel_values"].numpy())
    lines = _run_infer(Path(image["results"]["ort"]["path"]), str(png), str(npy))
    assert len(lines) == 2
    for i, line in enumerate(lines):
        assert line["label"] in data.info["label_names"]
        ref = parity.reference_logits(image["model"], image["task"],
                                      [{"pixel_values": data.val[i]["pixel_values"][None]}])[0][0]
        assert np.abs(np.array(line["logits"]) - ref).max() < TOLERANCE


def test_tokenizer_dir_of_the_builtin_model(text):
    folder = md.tokenizer_dir(text["source"])
    assert folder is not None and (folder / "tokenizer.json").is_file()


def test_missing_tokenizer_fails_clearly(text, tmp_path):
    real = md.tokenizer_dir(text["source"])
    folder = tmp_path / "model-without-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).symlink_to(real / name)
    spec = text["source"].spec.model_copy(update={"model": type(text["source"].spec.model)(path=str(folder))})
    source = Source("r-no-tok", tmp_path, {}, spec, tmp_path)
    with pytest.raises(JobFailed, match="has no tokenizer files") as err:
        md.tokenizer_dir(source)
    assert str(folder) in str(err.value) and "save_pretrained" in err.value.hint
    with pytest.raises(JobFailed, match="tokenizer"):
        write_ort_package(text["results"]["onnx"]["path"], tmp_path / "ort", task_name=text["task"],
                          labels=["a", "b"], preprocessing={}, tokenizer_dir=None)
    assert not (tmp_path / "ort").exists()


class KthValue(torch.nn.Module):
    """A model with an operation neither ONNX exporter translates (aten::kthvalue, torch 2.14)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, pixel_values):
        return torch.kthvalue(self.conv(pixel_values).flatten(2), 2, dim=-1).values


def test_unsupported_op_is_named_and_leaves_no_file(tmp_path):
    path = tmp_path / "onnx" / "model.onnx"
    batch = {"pixel_values": torch.rand(2, 3, 8, 8)}
    with pytest.raises(JobFailed, match="kthvalue") as err:
        export_onnx(KthValue(), "image_classification", batch, path)
    assert "not supported by either exporter" in str(err.value) and "torchscript or pt2" in err.value.hint
    assert list(path.parent.iterdir()) == []  # neither model.onnx nor the temporary folder


def test_failed_export_keeps_the_previous_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"previous export")
    with pytest.raises(JobFailed):
        export_onnx(KthValue(), "image_classification", {"pixel_values": torch.rand(2, 3, 8, 8)}, path)
    assert path.read_bytes() == b"previous export" and sorted(tmp_path.iterdir()) == [path]


def test_opset_17(image, tmp_path):
    res = export_onnx(image["model"], image["task"], image["batches"][0], tmp_path / "model.onnx", opset=17,
                      slim=True)
    assert res["opset"] == 17
    model = onnx.load(res["path"])
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17
    # torch 2.14's converter cannot take the CNN's graph down to 17, so the TorchScript exporter ran, and says why.
    assert res["exporter"] in ("dynamo", "torchscript")
    assert (res["exporter"] == "torchscript") == bool(res["fallback_reason"])
    if res["exporter"] == "torchscript":
        assert "opset" in res["fallback_reason"]
    assert res["slimmed"]["nodes_after"] <= res["slimmed"]["nodes_before"]
    got = parity.check("onnx", res["path"], image["task"], image["batches"], image["reference"], TOLERANCE)
    assert got["passed"]


@pytest.mark.parametrize("opset", [18, 17])
def test_external_data_above_the_limit(image, tmp_path, monkeypatch, opset):
    # The 2 GB limit, lowered so the CNN's 0.4 MB of weights are "large": both exporters' external-data paths.
    import engine.export.onnx as ox

    monkeypatch.setattr(ox, "TWO_GB", 100_000)
    res = export_onnx(image["model"], image["task"], image["batches"][0], tmp_path / "onnx" / "model.onnx",
                      opset=opset, metadata={"ember.task": image["task"]})
    path = Path(res["path"])
    assert res["files"] == [str(path), str(path) + ".data"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert path.stat().st_size < 100_000 < Path(res["files"][1]).stat().st_size
    assert res["bytes"] == sum(Path(f).stat().st_size for f in res["files"]) and res["opset"] == opset
    pkg = write_ort_package(path, tmp_path / "ort", task_name=image["task"], labels=md.labels(image["data"]),
                            preprocessing=md.preprocessing(image["source"], image["data"]), tokenizer_dir=None)
    assert "model.onnx.data" in {Path(f).name for f in pkg["files"]}
    for fmt, where in (("onnx", path), ("ort", pkg["path"])):
        assert parity.check(fmt, where, image["task"], image["batches"], image["reference"], TOLERANCE)["passed"]


@pytest.fixture(scope="module")
def int8_digits(tmp_path_factory):
    """The digits CNN as the compression job leaves a dynamic int8 variant: opset 17, MatMulInteger/ConvInteger."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tests.engine.export_models import export_digits

    home = tmp_path_factory.mktemp("int8")
    fp32 = export_digits(home, opset=17)
    path = home / "variant" / "model.onnx"
    path.parent.mkdir()
    quantize_dynamic(str(fp32["path"]), str(path), weight_type=QuantType.QInt8)
    return {"path": path, "batch": fp32["batch"]}


def _logits(path, batch) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path)).run(["logits"], {"pixel_values": batch["pixel_values"].numpy()})[0]


def test_a_variants_onnx_is_converted_to_the_opset_asked(int8_digits, tmp_path):
    from engine.export.onnx import copy_variant

    src = int8_digits["path"]
    same = copy_variant(src, tmp_path / "same" / "model.onnx", {"ember.task": "image_classification"}, 17)
    assert same["opset"] == 17 and same["converted_from"] is None and same["exporter"] == "copied (quantized variant)"
    res = copy_variant(src, tmp_path / "onnx" / "model.onnx", {"ember.task": "image_classification"}, 18)
    model = onnx.load(res["path"])
    assert res["opset"] == 18 and res["converted_from"] == 17 and "converted from opset 17" in res["exporter"]
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 18
    assert {p.key: p.value for p in model.metadata_props}["ember.task"] == "image_classification"
    assert [i["name"] for i in res["inputs"]] == ["pixel_values"]
    # The same int8 model, at another opset: the same logits.
    assert np.array_equal(_logits(res["path"], int8_digits["batch"]), _logits(src, int8_digits["batch"]))


def test_a_variants_onnx_that_cannot_be_converted_stops_the_export(int8_digits, tmp_path):
    from engine.export.onnx import copy_variant

    dst = tmp_path / "onnx" / "model.onnx"
    # ONNX's converter has no adapter taking this graph's Reshape below opset 14.
    with pytest.raises(JobFailed) as err:
        copy_variant(int8_digits["path"], dst, {}, 13)
    assert "opset 17" in str(err.value) and "to opset 13" in str(err.value)
    assert "opset: 17" in err.value.hint
    assert not dst.exists()


def test_requirements_follow_what_the_model_needs(int8_digits, tmp_path):
    from engine.export.ort_package import model_needs, ort_floor

    assert ort_floor(8, 17) == "1.16" and ort_floor(10, 18) == "1.18" and ort_floor(10, 22) == "1.21"
    assert ort_floor(10, 23) == "1.23" and ort_floor(8, 17, conv_int8=True) == "1.24"
    # The dynamic int8 CNN: ConvInteger with int8 weights, which onnxruntime runs from 1.24 (Python 3.11+).
    needs = model_needs(int8_digits["path"])
    assert needs == {"ir_version": 8, "opset": 17, "conv_int8": True}
    pkg = write_ort_package(int8_digits["path"], tmp_path / "ort", task_name="image_classification",
                            labels=[str(i) for i in range(10)],
                            preprocessing={"size": [32, 32], "mean": [0.5] * 3, "std": [0.5] * 3},
                            tokenizer_dir=None)
    reqs = (Path(pkg["path"]) / "requirements.txt").read_text()
    assert "onnxruntime>=1.24\n" in reqs and reqs.startswith("# Python 3.11 or newer")
