"""TensorRT compatibility findings, trtexec command lines and output parsing, Jetson version tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.export import jetson_profiles, trt_compat, trt_support, trtexec
from engine.training.context import JobFailed

DATA = Path(__file__).resolve().parent.parent / "data"


def _model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(inits))
    opsets = [helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in extra_opsets]]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _layernorm_model(opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    scale = numpy_helper.from_array(np.ones(8, np.float32), "scale")
    bias = numpy_helper.from_array(np.zeros(8, np.float32), "bias")
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="/encoder/ln", axis=-1)
    model = _model([node], [x], [y], [scale, bias], opset=opset)
    onnx.checker.check_model(model)
    return model


def _matmul_integer_model():
    """What ONNX Runtime's dynamic int8 quantization writes: DynamicQuantizeLinear + MatMulInteger."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [1, 3])
    w = numpy_helper.from_array(np.ones((4, 3), np.int8), "w")
    wz = numpy_helper.from_array(np.array(0, np.int8), "w_zero")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="/fc/quant"),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "w_zero"], ["y"], name="/fc/MatMul_quant")]
    model = _model(nodes, [x], [y], [w, wz], opset=17)
    onnx.checker.check_model(model)
    return model


def _qdq_model(zero_point=0):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(zero_point, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="/in/q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="/in/dq"),
             helper.make_node("Relu", ["dq"], ["y"], name="/act/Relu")]
    return _model(nodes, [x], [y], inits, opset=17)


def _errors(findings):
    return [f for f in findings if f["severity"] == "error"]


def test_an_operator_the_parser_lacks_is_an_error_naming_node_op_and_fix():
    model = _layernorm_model(opset=17)  # JetPack 5.1.x: TensorRT 8.5 reads opset 17 but has no LayerNormalization
    findings = trt_compat.check(model, "8.5", profile={"x": {"min": [1, 8], "opt": [1, 8], "max": [4, 8]}})
    errors = _errors(findings)
    assert len(errors) == 1, findings
    err = errors[0]
    assert err["node"] == "/encoder/ln" and err["op"] == "LayerNormalization"
    assert "8.5" in err["message"] and "/encoder/ln" in err["message"]
    assert "export with opset 16" in err["fix"]  # the exporter then writes it as basic ops
    assert "TensorRT 8.6" in err["fix"] and "JetPack 6.0" in err["fix"]
    assert trt_compat.summary(findings) == {"ok": False, "errors": 1, "warnings": 0}
    # the same graph is fine where the parser has the op
    assert not _errors(trt_compat.check(model, "8.6", profile={"x": {"min": [1, 8], "opt": [1, 8], "max": [4, 8]}}))


def test_an_onnx_runtime_contrib_op_is_an_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    node = helper.make_node("FastGelu", ["x"], ["y"], name="/mlp/FastGelu", domain="com.microsoft")
    model = _model([node], [x], [y], extra_opsets=[("com.microsoft", 1)])
    err = _errors(trt_compat.check(model, "10.3"))
    assert [(e["node"], e["op"]) for e in err] == [("/mlp/FastGelu", "com.microsoft::FastGelu")]
    assert "com.microsoft" in err[0]["fix"]


def test_a_too_new_opset_for_an_older_jetpack_is_an_error_with_the_opset_to_export():
    versions = jetson_profiles.jetpack_versions("nano", "4.6.1")
    assert versions == {"jetpack": "4.6.1", "l4t": "32.7.1", "tensorrt": "8.2.1", "cuda": "10.2"}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="/act/Relu")], [x], [y], opset=18)
    errors = _errors(trt_compat.check(model, versions["tensorrt"]))
    assert len(errors) == 1
    assert errors[0]["op"] == "opset 18" and "opset 18" in errors[0]["message"] and "13" in errors[0]["message"]
    assert errors[0]["fix"].startswith("export with opset 13")
    assert not _errors(trt_compat.check(model, jetson_profiles.jetpack_versions("orin_nano")["tensorrt"]))


def test_int8_needs_qdq_not_onnx_runtime_dynamic_int8():
    findings = trt_compat.check(_matmul_integer_model(), "10.3", precision="int8")
    int8 = [f for f in _errors(findings) if "QDQ" in f["message"]]
    assert len(int8) == 1 and int8[0]["node"] in ("/fc/quant", "/fc/MatMul_quant")
    assert "compress.quantize" in int8[0]["fix"] and "static" in int8[0]["fix"] and "tensorrt" in int8[0]["fix"]
    # and each integer op is an unsupported-op error with the same fix
    ops = {f["op"] for f in _errors(findings)}
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops
    # a QDQ graph is what int8 wants; one without Q/DQ nodes is refused
    assert not _errors(trt_compat.check(_qdq_model(), "10.3", precision="int8"))
    none = _errors(trt_compat.check(_layernorm_model(), "10.3", precision="int8",
                                    profile={"x": {"min": [1, 8], "opt": [1, 8], "max": [1, 8]}}))
    assert len(none) == 1 and "placeholder scales" in none[0]["message"]
    # TensorRT takes symmetric quantization only
    asym = _errors(trt_compat.check(_qdq_model(zero_point=3), "10.3", precision="int8"))
    assert {f["node"] for f in asym} == {"/in/q", "/in/dq"}


def test_dynamic_axes_need_a_fitting_profile():
    model = _layernorm_model(opset=17)
    err = _errors(trt_compat.check(model, "10.3"))
    assert [(e["node"], e["op"]) for e in err] == [("x", "input")] and "batch" in err[0]["message"]
    bad = _errors(trt_compat.check(model, "10.3", profile={"x": {"min": [1, 4], "opt": [2, 8], "max": [1, 8]}}))
    assert len(bad) == 1 and "axis 1 is fixed at 8" in bad[0]["message"] and "axis 0" in bad[0]["message"]


def test_unknown_version_uses_the_nearest_known_with_a_warning_and_dla_fallbacks_warn():
    model = _layernorm_model(opset=17)
    profile = {"x": {"min": [1, 8], "opt": [1, 8], "max": [4, 8]}}
    findings = trt_compat.check(model, "10.7.0.23-1+cuda12.6", profile=profile, dla=True)
    assert trt_support.resolve("10.7") == ("10.3", False)
    warn = [f for f in findings if f["severity"] == "warning"]
    assert any("10.3" in f["message"] and f["op"] == "tensorrt" for f in warn)
    assert any(f["node"] == "/encoder/ln" and "DLA" in f["message"] for f in warn)
    assert not _errors(findings)
    with pytest.raises(JobFailed):
        trt_compat.check(model, "not-a-version")


def test_trtexec_build_commands_per_tensorrt_version():
    shapes = trtexec.profile_shapes(
        [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"]},
         {"name": "attention_mask", "dtype": "int64", "shape": ["batch", "sequence"]}],
        task_name="text_classification", max_batch=8, opt_batch=2, seq_len=64, dynamic_batch=True,
        dynamic_sequence=True)
    assert shapes["input_ids"] == {"min": [1, 1], "opt": [2, 64], "max": [8, 64]}
    old = trtexec.build_command("model.onnx", "model.plan", precision="fp16", shapes=shapes, workspace_mb=512,
                                dla_core=None, tensorrt_version="8.2.1")
    assert old == ["trtexec", "--onnx=model.onnx", "--saveEngine=model.plan", "--workspace=512", "--fp16",
                   "--minShapes=input_ids:1x1,attention_mask:1x1", "--optShapes=input_ids:2x64,attention_mask:2x64",
                   "--maxShapes=input_ids:8x64,attention_mask:8x64", "--skipInference"]
    new = trtexec.build_command("model.onnx", "model.plan", precision="int8", shapes=shapes, workspace_mb=512,
                                dla_core=1, tensorrt_version="10.3.0")
    assert "--memPoolSize=workspace:512M" in new and not any(a.startswith("--workspace") for a in new)
    assert new[new.index("--int8") + 1] == "--fp16"
    assert "--useDLACore=1" in new and "--allowGPUFallback" in new
    assert "--memPoolSize=workspace:1024" in trtexec.build_command("m.onnx", "m.plan", tensorrt_version="8.5.2")
    bench = trtexec.bench_command("model.plan", shapes=shapes, duration_s=2.5, tensorrt_version="10.3")
    assert bench == ["trtexec", "--loadEngine=model.plan", "--shapes=input_ids:2x64,attention_mask:2x64",
                     "--warmUp=500", "--duration=3"]
    static = trtexec.profile_shapes([{"name": "pixel_values", "dtype": "float32", "shape": [1, 3, 32, 32]}],
                                    task_name="image_classification", max_batch=8)
    assert static == {}  # trtexec refuses shapes for static inputs


@pytest.mark.parametrize(("name", "version", "percentiles"), [("trtexec_trt8.txt", "8.2.1", {"p99"}),
                                                                ("trtexec_trt10.txt", "10.3.0", {"p90", "p95", "p99"})])
def test_parse_recorded_trtexec_output(name, version, percentiles):
    out = trtexec.parse_output((DATA / name).read_text(encoding="utf-8"))
    assert out["tensorrt_version"] == version and out["passed"] is True
    assert out["throughput_qps"] == pytest.approx(1245.59 if version.startswith("8") else 612.547)
    lat, gpu = out["latency_ms"], out["gpu_compute_ms"]
    assert set(lat) == {"min", "max", "mean", "median"} | percentiles and set(gpu) == set(lat)
    assert lat["min"] <= lat["median"] <= lat["max"] and gpu["mean"] < lat["mean"]
    if version.startswith("10"):
        assert lat["p95"] == pytest.approx(1.66406) and gpu["median"] == pytest.approx(1.58887)
    else:
        assert lat["p99"] == pytest.approx(0.874023) and gpu["mean"] == pytest.approx(0.612447)


def test_parse_output_without_a_summary_says_so():
    text = (DATA / "trtexec_trt10.txt").read_text(encoding="utf-8")
    build_only = text[:text.index("=== Performance summary ===")]
    with pytest.raises(ValueError, match="no trtexec performance summary"):
        trtexec.parse_output(build_only)
    with pytest.raises(ValueError, match="empty"):
        trtexec.parse_output("")


def test_jetson_profiles_and_host_probe():
    nano = jetson_profiles.profile("nano")
    assert "int8" not in nano["precisions"] and nano["default_jetpack"] == "4.6.6"
    assert jetson_profiles.profile("orin_nano")["dla_cores"] == 0
    assert jetson_profiles.jetpack_versions("orin_nano")["tensorrt"] == "10.3.0"
    assert jetson_profiles.jetpack_versions("agx_xavier", "5.1.2")["tensorrt"] == "8.5.2"
    with pytest.raises(JobFailed, match="does not run JetPack 6.1"):
        jetson_profiles.jetpack_versions("xavier_nx", "6.1")
    got = jetson_profiles.from_probe({"l4t": "R36.4.0", "jetpack": "6.1+b123", "tensorrt": "10.3.0.30-1+cuda12.5"})
    assert got == {"jetpack": "6.1", "l4t": "36.4.0", "tensorrt": "10.3.0", "cuda": "12.6", "source": "probe"}
    only_l4t = jetson_profiles.from_probe({"l4t": "# R35 (release), REVISION: 4.1, GCID: 33958178"})
    assert (only_l4t["jetpack"], only_l4t["tensorrt"], only_l4t["source"]) == ("5.1.2", "8.5.2", "l4t")
