"""Triton model repository for a real exported model (the digits CNN), names and dims read back from the ONNX file."""

from __future__ import annotations

import re

import onnx
import pytest

from engine.export import triton
from engine.training.context import JobFailed
from tests.engine.export_models import export_digits


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory):
    """The built-in digits CNN exported with engine.compress.onnx_export (dynamic batch axis)."""
    out = export_digits(tmp_path_factory.mktemp("home"))
    return out["path"], out["report"], [str(n) for n in out["data"].info["label_names"]]


def test_triton_config_matches_the_exported_model(digits_onnx, tmp_path):
    path, report, labels = digits_onnx
    inputs, outputs = triton.model_io(path)
    assert [i["name"] for i in inputs] == report["inputs"] == ["pixel_values"]
    assert inputs[0]["dtype"] == "float32" and inputs[0]["shape"] == ["batch", 3, 32, 32]
    assert outputs == [{"name": "logits", "dtype": "float32", "shape": ["batch", 10]}]

    repo = triton.write_triton_repo(tmp_path / "triton", "digits-cnn_v1", model_file=path, inputs=inputs,
                                    outputs=outputs, max_batch=8, labels=labels)
    root = tmp_path / "triton" / "digits-cnn_v1"
    assert repo["path"] == str(root)
    assert sorted(repo["files"]) == ["1/model.onnx", "config.pbtxt", "labels.txt"]
    assert (root / "1" / "model.onnx").read_bytes() == path.read_bytes()
    assert (root / "labels.txt").read_text().splitlines() == labels
    text = (root / "config.pbtxt").read_text()
    assert 'name: "digits-cnn_v1"' in text and 'platform: "onnxruntime_onnx"' in text
    assert "max_batch_size: 8" in text
    assert re.search(r'name: "pixel_values"\s+data_type: TYPE_FP32\s+dims: \[ 3, 32, 32 \]', text)
    assert re.search(r'name: "logits"\s+data_type: TYPE_FP32\s+dims: \[ 10 \]\s+label_filename: "labels.txt"', text)
    assert "preferred_batch_size: [ 2, 4, 8 ]" in text and "max_queue_delay_microseconds: 100" in text
    assert "count: 1" in text and "kind: KIND_AUTO" in text
    # the dims in the config are the model's, batch axis left out
    model = onnx.load(str(root / "1" / "model.onnx"))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    assert repo["config"]["input"][0]["dims"] == dims
    assert repo["config"]["output"][0]["dims"] == [10]


def test_triton_text_model_types_and_plan_platform(tmp_path):
    plan = tmp_path / "model.plan"
    plan.write_bytes(b"engine bytes")
    inputs = [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"]},
              {"name": "attention_mask", "dtype": "int64", "shape": ["batch", "sequence"]}]
    outputs = [{"name": "logits", "dtype": "float32", "shape": ["batch", 2]}]
    repo = triton.write_triton_repo(tmp_path, "minilm", model_file=plan, inputs=inputs, outputs=outputs,
                                    max_batch=16, labels=["neg", "pos"], kind="plan", instance_count=2,
                                    dynamic_batching=False)
    text = (tmp_path / "minilm" / "config.pbtxt").read_text()
    assert 'platform: "tensorrt_plan"' in text and "kind: KIND_GPU" in text and "count: 2" in text
    assert re.search(r'name: "input_ids"\s+data_type: TYPE_INT64\s+dims: \[ -1 \]', text)
    assert "dynamic_batching" not in text
    assert "1/model.plan" in repo["files"]
    for bad in ("", "has space", "a/b", "ü"):
        with pytest.raises(JobFailed, match="invalid Triton model name"):
            triton.write_triton_repo(tmp_path, bad, model_file=plan, inputs=inputs, outputs=outputs, max_batch=1)
