"""TensorRT on this machine's GPU: build the digits CNN's engine, run it, compare with ONNX Runtime."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_build_run_and_benchmark_the_digits_cnn(tmp_path):
    from engine.export import tensorrt_local

    ok, why = tensorrt_local.available()
    if not ok:
        pytest.skip(why)
    os.environ.setdefault("EMBER_HOME", str(tmp_path / "home"))
    from engine.api.train_spec import TrainSpec
    from engine.compress.onnx_export import export_onnx, feeds, session
    from engine.export.triton import model_io
    from engine.export.trtexec import profile_shapes
    from engine.tasks import get_task

    spec = TrainSpec.model_validate({"task": "image_classification", "method": {"kind": "full"}, "device": "cpu"})
    task = get_task(spec.task)
    data = task.load_data(spec)
    model = task.build_model(spec, data).eval()
    batches = [data.collate([data.val[i] for i in range(k, k + n)]) for k, n in ((0, 4), (4, 3))]
    onnx_path = tmp_path / "model.onnx"
    export_onnx(model, "image_classification", batches[0], onnx_path, opset=17)
    inputs, _ = model_io(onnx_path)
    shapes = profile_shapes(inputs, task_name="image_classification", max_batch=8, opt_batch=4)
    report = tensorrt_local.build_engine(onnx_path, tmp_path / "model.plan", precision="fp32", shapes=shapes,
                                         workspace_mb=256)
    assert report["bytes"] > 0
    got = tensorrt_local.run(tmp_path / "model.plan", [{"pixel_values": b["pixel_values"]} for b in batches])
    sess = session(onnx_path)
    for batch, logits in zip(batches, got, strict=True):
        ref = sess.run(["logits"], feeds(["pixel_values"], batch))[0]
        assert logits.is_cuda and tuple(logits.shape) == ref.shape
        assert np.abs(logits.cpu().numpy() - ref).max() < 1e-3
    bench = tensorrt_local.benchmark(tmp_path / "model.plan", shapes, duration_s=0.5)
    assert bench["runs"] >= 5 and bench["latency_ms"]["median"] > 0 and bench["batch"] == 4
