"""export.model jobs against a real engine: real fine-tunes, every format reloaded in a fresh process."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from tests.engine.test_compress_jobs import EVAL, finish

pytestmark = pytest.mark.timeout(900)


def _result(job: dict) -> dict:
    return json.loads((Path(job["run_dir"]) / "result.json").read_text())


def test_minilm_to_every_portable_format_with_parity_and_a_jetson_bundle(engine_with_runs):
    # The session's shared MiniLM fine-tune (tests/fixtures/trained_runs.py): parity compares the exported
    # files with this model, whatever its accuracy, so any finished fine-tune will do.
    eng, runs = engine_with_runs("text")
    with eng.client() as c:
        parent = c.call("jobs.get", id=runs["text"])
        assert parent["state"] == "succeeded", parent
        spec = {"source_run": parent["id"], "formats": ["onnx", "ort", "torchscript", "pt2", "triton", "jetson"],
                "target": "orin_nano", "parity_samples": 32}
        job = finish(c, c.call("jobs.start", kind="export.model", spec=spec, name="export")["id"])
        assert job["state"] == "succeeded", job
        assert job["parent_id"] == parent["id"]
        result = _result(job)
        formats = result["formats"]
        assert set(formats) == set(spec["formats"])
        for fmt in ("onnx", "ort", "torchscript", "pt2"):
            parity = formats[fmt]["parity"]
            # fp32 text logits: the acceptance bound, on the validation split, each format in a fresh process
            assert parity["passed"] and parity["enforced"], (fmt, parity)
            assert parity["max_abs_diff"] < 1e-4 and parity["top1_agreement"] == 1.0, (fmt, parity)
            assert parity["samples"] == 32
            assert Path(formats[fmt]["path"]).exists()
        # The ONNX Runtime package holds the fused graph (checked for parity above), timed beside the exported one.
        graph = formats["ort"]["graph"]
        assert graph["fused"]["Attention"] == 6 and graph["fused"]["BiasGelu"] == 6, graph
        assert graph["latency"]["unfused_ms"] > 0 and graph["latency"]["fused_ms"] > 0
        assert not (Path(job["run_dir"]) / "export" / ".fused").exists()
        assert result["compat"]["ok"] and result["compat"]["tensorrt_version"].startswith("10.")
        bundle = Path(formats["jetson"]["path"])
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["source_run"] == parent["id"]
        # The tokenizer travels with the model; the base model's own weights do not.
        assert "tokenizer.json" in manifest["files"] and not any(n.endswith(".safetensors") for n in manifest["files"])
        names = tarfile.open(formats["jetson"]["archive"]["path"]).getnames()
        assert any(n.endswith("manifest.json") for n in names) and any(n.endswith("build_engine.sh") for n in names)
        config = (Path(formats["triton"]["path"]) / "config.pbtxt").read_text() \
            if (Path(formats["triton"]["path"]) / "config.pbtxt").exists() \
            else next(Path(formats["triton"]["path"]).rglob("config.pbtxt")).read_text()
        assert 'name: "input_ids"' in config and "TYPE_INT64" in config
        # The export is listed with the run it came from, not as a variant.
        reply = c.call("compress.variants", id=parent["id"])
        assert [v["job"]["id"] for v in reply["variants"]] == []
        assert reply["parent_deployments"][0]["job"] == job["id"]
        events = c.call("jobs.logs", id=job["id"], tail=400)["lines"]
        assert any("top-1 agreement" in line for line in events)


def test_int8_variant_exports_with_agreement_reported_and_refuses_what_it_cannot(engine_with_runs, capsys):
    from engine.cli.main import main as ember

    eng, runs = engine_with_runs("digits")
    with eng.client() as c:
        parent = c.call("jobs.get", id=runs["digits"])
        assert parent["state"] == "succeeded", parent
        variant = finish(c, c.call("jobs.start", kind="compress.quantize",
                                   spec={"source_run": parent["id"], "mode": "dynamic", "eval": EVAL})["id"])
        assert variant["state"] == "succeeded", variant
        capsys.readouterr()
        # The headless command: submits the job, follows it, prints each format's parity.
        assert ember(["export", variant["id"], "--formats", "onnx,ort", "--parity-samples", "48"]) == 0
        printed = capsys.readouterr().out
        job = c.call("jobs.get", id=re.search(r"started (\S+) \(export.model\)", printed).group(1))
        assert job["state"] == "succeeded", job
        assert "reported, not enforced" in printed and re.search(r"^ort .* passed\*|^ort .* FAILED\*", printed, re.M)
        for fmt in ("onnx", "ort"):
            parity = _result(job)["formats"][fmt]["parity"]
            assert not parity["enforced"] and parity["samples"] == 48
            assert 0.5 <= parity["top1_agreement"] <= 1.0  # int8 against its fp32 parent: reported
            assert parent["id"] in parity["reference"] and parity["reported_because"] == "quantized"
        # The compression job wrote opset 17; the export applies the asked (default) opset 18 by converting it.
        onnx_entry = _result(job)["formats"]["onnx"]
        assert onnx_entry["opset"] == 18 and onnx_entry["converted_from"] == 17
        # TorchScript needs torch weights: refused before anything is written.
        refused = finish(c, c.call("jobs.start", kind="export.model",
                                   spec={"source_run": variant["id"], "formats": ["onnx", "torchscript"]})["id"])
        assert refused["state"] == "failed"
        assert "only an ONNX model" in refused["error"]["message"] and "parent" in refused["error"]["hint"]
        assert not (Path(refused["run_dir"]) / "export").exists()
        # Dynamic int8 is ONNX Runtime's own: TensorRT needs QDQ. The finding names the node and the fix,
        # and the job fails before any bundle is written.
        bad = finish(c, c.call("jobs.start", kind="export.model",
                               spec={"source_run": variant["id"], "formats": ["jetson"], "target": "agx_orin",
                                     "precision": "int8"})["id"])
        assert bad["state"] == "failed"
        assert "static" in bad["error"]["hint"]
        compat = _result(bad)["compat"]
        assert not compat["ok"] and any(f["severity"] == "error" and f["node"] for f in compat["findings"])
        assert not (Path(bad["run_dir"]) / "export" / "jetson").exists()
