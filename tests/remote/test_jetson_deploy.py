"""One click to Jetson against a real OpenSSH server on loopback (tests/sshd.py), no Jetson needed.

The "Jetson" is this machine behind sshd: a venv (tests.sshd.host_venv) is the host's Python, and its bin
folder holds tests/fixtures/fake_trtexec as ``trtexec`` -- a STAND-IN for NVIDIA's trtexec that checks the
arguments, the ONNX file and the bundle's manifest like the real one would be asked to, and prints trtexec's
output format with made-up figures. Everything else is real: the digits CNN exported to ONNX, the bundle
written by engine.export.jetson_bundle, SSH, SFTP, the bundle's own build_engine.sh and benchmark.sh.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from pathlib import Path

import psutil
import pytest

from engine.api.host_spec import HostSpec
from engine.launch import ssh
from engine.training.context import JobFailed
from tests.sshd import host_venv

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

FAKE_TRTEXEC = Path(__file__).resolve().parent.parent / "fixtures" / "fake_trtexec"


@pytest.fixture(autouse=True)
def _only_test_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_SSH_KNOWN_HOSTS", "")  # only the key this test trusts, never the user's


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The digits CNN exported to ONNX (dynamic batch), with its inputs as write_bundle takes them."""
    import onnx

    from engine.api.train_spec import TrainSpec
    from engine.compress.onnx_export import export_onnx
    from engine.tasks import get_task

    spec = TrainSpec.model_validate({"task": "image_classification", "method": {"kind": "full"}, "device": "cpu"})
    task = get_task(spec.task)
    data = task.load_data(spec)
    model = task.build_model(spec, data).eval()
    batch = data.collate([data.val[i] for i in range(4)])
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    export_onnx(model, spec.task, batch, path)
    graph = onnx.load(str(path)).graph

    def info(values) -> list[dict]:
        return [{"name": v.name, "dtype": "float32",
                 "shape": [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                           for d in v.type.tensor_type.shape.dim]} for v in values]

    return {"path": path, "inputs": info(graph.input), "outputs": info(graph.output),
            "labels": [str(n) for n in data.info.get("label_names") or range(10)]}


def make_bundle(onnx_model: dict, folder: Path, benchmark_s: float = 2.0) -> Path:
    from engine.export import jetson_bundle
    from engine.export.trtexec import profile_shapes

    shapes = profile_shapes(onnx_model["inputs"], task_name="image_classification", max_batch=8, opt_batch=1)
    out = jetson_bundle.write_bundle(
        folder, onnx_files=[onnx_model["path"]], inputs=onnx_model["inputs"], outputs=onnx_model["outputs"],
        task_name="image_classification", labels=onnx_model["labels"],
        preprocessing={"size": [32, 32], "channels": 3, "color": "RGB", "resize": "bilinear", "scale": 1 / 255,
                       "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0], "layout": "NCHW"},
        tokenizer_dir=None, target="orin_nano", jetpack="6.1", precision="fp16", shapes=shapes, workspace_mb=256,
        dla_core=None, source_run="r20260101-000000-test", spec_sha256="0" * 64, benchmark_s=benchmark_s)
    return Path(out["path"])


@pytest.fixture(scope="module")
def bundle(onnx_model: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bundle(onnx_model, tmp_path_factory.mktemp("bundle") / "digits")


@pytest.fixture(scope="module")
def jetson(sshd, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A host profile for the loopback sshd whose Python is a venv holding the trtexec stand-in, key trusted."""
    import engine

    root = tmp_path_factory.mktemp("jetson")
    python = host_venv(root / "venv", engine.__version__)
    # As pip does for a console script: the venv's Python in the shebang (it has onnx; the system one may not).
    trtexec = python.parent / "trtexec"
    trtexec.write_text(f"#!{python}\n" + FAKE_TRTEXEC.read_text().split("\n", 1)[1])
    trtexec.chmod(0o755)
    host = HostSpec.model_validate(sshd.host("orin", python=str(python), workdir=str(root / "work"), role="jetson"))
    known_hosts = root / "home" / "known_hosts"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_SSH_KNOWN_HOSTS", "")
        asyncio.run(ssh.trust(known_hosts, host, sshd.fingerprint))
    return {"host": host, "known_hosts": known_hosts, "trtexec": trtexec, "work": root / "work"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_deploy_builds_and_benchmarks_on_the_device_with_streamed_output(jetson, bundle):
    from engine.export import deploy, jetson_bundle

    events: list[tuple[float, str, tuple]] = []
    start = time.monotonic()
    out = deploy.deploy(jetson["host"], jetson["known_hosts"], bundle, f"{jetson['host'].workdir}/deploy/r-e2e",
                        on_event=lambda stage, *args: events.append((time.monotonic() - start, stage, args)))
    remote = jetson["work"] / "deploy" / "r-e2e"
    assert out["remote_dir"] == str(remote)
    # The probe found the stand-in by the scripts' lookup (the host Python's bin) and read its banner.
    assert out["facts"]["trtexec"]["path"] == str(jetson["trtexec"])
    assert out["facts"]["trtexec"]["tensorrt_version"] == "10.3.0"
    assert out["facts"]["jetson"] is None  # no /etc/nv_tegra_release here
    local = _files(bundle)
    assert out["upload"] == {"sent": len(local), "skipped": 0, "bytes": sum(p.stat().st_size for p in
                                                                            bundle.rglob("*") if p.is_file()),
                             "files": len(local)}
    # Every bundle file is on the host as written, the manifest included, and the bundle verifies there.
    on_host = _files(remote)
    assert {name: on_host.get(name) for name in local} == local
    assert not [name for name in on_host if name.endswith(deploy.PART)]
    assert jetson_bundle.verify_bundle(remote) == []
    plan = json.loads(next(p for p in remote.rglob("*.plan")).read_text())
    assert "NOT A TensorRT ENGINE" in plan["note"] and plan["precision"] == "fp16"
    assert plan["onnx_sha256"] == local[next(n for n in local if n.endswith(".onnx"))]

    uploads = [args for _t, stage, args in events if stage == "upload"]
    assert uploads[-1][0] == 1.0 and all(0.0 <= f <= 1.0 for f, _m in uploads)
    build = [(t, args[0]) for t, stage, args in events if stage == "build"]
    bench = [(t, args[0]) for t, stage, args in events if stage == "benchmark"]
    assert any("&&&& PASSED TensorRT.trtexec" in line and "--saveEngine" in line for _t, line in build)
    assert any("=== Performance summary ===" in line for _t, line in bench)
    # Streamed, not collected at the end: the benchmark's lines arrived over its run (2 s), not all at once.
    assert bench[-1][0] - bench[0][0] > 1.0, bench
    assert out["build"]["rc"] == 0 and out["build"]["seconds"] > 0
    figures = out["benchmark"]
    assert figures["throughput_qps"] > 0 and figures["passed"] is True
    assert 0 < figures["latency_ms"]["min"] <= figures["latency_ms"]["mean"] <= figures["latency_ms"]["max"]
    assert figures["latency_ms"]["p99"] >= figures["latency_ms"]["median"]
    assert figures["tensorrt_version"] == "10.3.0"


def test_interrupted_upload_leaves_no_manifest_and_resumes(jetson, bundle, sshd):
    from engine.export import deploy, jetson_bundle

    remote = jetson["work"] / "deploy" / "r-resume"
    dropped = []

    def drop_after_first_file(stage: str, *args) -> None:
        if stage == "upload" and args[1].startswith("sent ") and not dropped:
            dropped.append(args[1])
            sshd.drop_connections()  # the link dies as a network failure would end it

    with pytest.raises(JobFailed) as err:
        deploy.deploy(jetson["host"], jetson["known_hosts"], bundle, str(remote), on_event=drop_after_first_file)
    assert dropped
    assert "connection to orin" in str(err.value) and "lost while uploading" in str(err.value)
    assert "resumes" in err.value.hint and "kept" in err.value.hint
    assert not (remote / deploy.MANIFEST).exists()
    there = [p.name for p in remote.iterdir() if not p.name.endswith(deploy.PART)]
    assert there and len(there) < len(_files(bundle))

    out = deploy.deploy(jetson["host"], jetson["known_hosts"], bundle, str(remote), on_event=lambda *a: None,
                        build=False, benchmark=False)
    assert out["upload"]["skipped"] == len(there) > 0
    assert out["upload"]["sent"] == len(_files(bundle)) - len(there)
    assert "build" not in out and "benchmark" not in out
    assert jetson_bundle.verify_bundle(remote) == []
    assert _files(remote) == _files(bundle)


def test_a_file_corrupted_on_the_host_is_sent_again(jetson, bundle):
    from engine.export import deploy, jetson_bundle

    remote = jetson["work"] / "deploy" / "r-corrupt"
    host, known = jetson["host"], jetson["known_hosts"]

    async def upload() -> dict:
        link = deploy.JetsonLink(host, known)
        try:
            await link.connect()
            return await link.upload(bundle, str(remote))
        finally:
            link.close()

    first = asyncio.run(upload())
    total = len(_files(bundle))
    assert (first["sent"], first["skipped"]) == (total, 0)
    # Same size, one byte different: only the sha256 can tell.
    onnx_file = next(remote.rglob("*.onnx"))
    data = bytearray(onnx_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    onnx_file.write_bytes(bytes(data))
    again = asyncio.run(upload())
    assert (again["sent"], again["skipped"]) == (2, total - 2)  # that file and the manifest
    assert again["bytes"] == onnx_file.stat().st_size + (bundle / deploy.MANIFEST).stat().st_size
    assert jetson_bundle.verify_bundle(remote) == []
    assert _files(remote) == _files(bundle)


def test_a_bundle_changed_after_it_was_written_fails_the_build_with_its_output(jetson, bundle, tmp_path):
    from engine.export import deploy

    bad = tmp_path / "digits"
    shutil.copytree(bundle, bad)
    labels = bad / "labels.json"
    labels.write_text(labels.read_text().replace("]", ', "extra"]'))  # after the manifest was written
    lines = []
    with pytest.raises(JobFailed) as err:
        deploy.deploy(jetson["host"], jetson["known_hosts"], bad, f"{jetson['host'].workdir}/deploy/r-bad",
                      on_event=lambda stage, *args: lines.append((stage, args)))
    message = str(err.value)
    assert message.startswith("build_engine.sh failed on orin (exit ")
    assert "labels.json" in message  # the script's own last lines name the file
    assert [s for s, _a in lines if s == "build"] and not [s for s, _a in lines if s == "benchmark"]
    assert "bundle changed after it was written" in err.value.hint


def test_stop_kills_the_benchmark_on_the_host(jetson, onnx_model, tmp_path):
    from engine.export import deploy

    long_bundle = make_bundle(onnx_model, tmp_path / "long", benchmark_s=60)
    seen = []

    def on_event(stage: str, *args) -> None:
        seen.append(stage)

    start = time.monotonic()
    out = deploy.deploy(jetson["host"], jetson["known_hosts"], long_bundle, f"{jetson['host'].workdir}/deploy/r-stop",
                        on_event=on_event, should_stop=lambda: seen.count("benchmark") >= 3)
    assert out["stopped"] == "benchmark" and out["build"]["rc"] == 0 and "benchmark" not in out
    assert time.monotonic() - start < 30
    # trtexec (the stand-in) and the script around it are gone on the host.
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if str(jetson["trtexec"]) in " ".join(p.info["cmdline"] or [])]
    assert not left, [p.info["cmdline"] for p in left]


def test_a_password_host_is_refused_before_connecting(jetson, bundle):
    from engine.export import deploy

    host = jetson["host"].model_copy(update={"auth": "password", "key_path": ""})
    with pytest.raises(JobFailed, match="use key or agent authentication for one-click deploy"):
        deploy.deploy(host, jetson["known_hosts"], bundle, "~/x", on_event=lambda *a: None)


def test_the_trtexec_stand_in_refuses_what_trtexec_refuses(jetson, onnx_model, tmp_path):
    import subprocess

    def fake(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(jetson["trtexec"]), *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60)

    shutil.copyfile(onnx_model["path"], tmp_path / "model.onnx")
    profile = ["--minShapes=pixel_values:1x3x32x32", "--optShapes=pixel_values:1x3x32x32",
               "--maxShapes=pixel_values:8x3x32x32"]
    for args, error in [
        (["--onnx=model.onnx", "--minShapes=input_ids:1x32", "--optShapes=input_ids:1x32",
          "--maxShapes=input_ids:1x32"], 'Cannot find input tensor with name "input_ids"'),
        (["--onnx=model.onnx", "--minShapes=pixel_values:1x3x32", *profile[1:]], "has 4 dims in the model"),
        (["--onnx=model.onnx", "--minShapes=pixel_values:4x3x32x32", *profile[1:]], "is not min <= opt <= max"),
        (["--onnx=model.onnx", "--memPoolSize=workspace:lots", *profile], "Invalid --memPoolSize"),
        (["--onnx=model.onnx", "--allowGPUFallback", *profile], "--allowGPUFallback needs --useDLACore"),
        (["--onnx=model.onnx", "--fp17", *profile], "Unknown option: --fp17"),
        (["--loadEngine=model.onnx"], "Engine deserialization failed"),
    ]:
        run = fake(*args)
        assert run.returncode == 1, (args, run.stdout)
        lines = run.stdout.splitlines()
        assert lines[0].startswith("&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # ")
        assert lines[-1].startswith("&&&& FAILED TensorRT.trtexec [TensorRT v100300] # ")
        assert any("[E]" in line and error in line for line in lines), (error, run.stdout)
    built = fake("--onnx=model.onnx", "--saveEngine=model.plan", "--int8", "--fp16", "--memPoolSize=workspace:64M",
                 "--skipInference", *profile)
    assert built.returncode == 0 and built.stdout.splitlines()[-1].startswith("&&&& PASSED"), built.stdout
    plan = json.loads((tmp_path / "model.plan").read_text())
    assert plan["precision"] == "int8" and plan["shapes"]["pixel_values"]["max"] == [8, 3, 32, 32]
    assert "=== Performance summary ===" not in built.stdout  # --skipInference
    outside = fake("--loadEngine=model.plan", "--shapes=pixel_values:9x3x32x32", "--duration=1")
    assert outside.returncode == 1 and "outside the engine's profile" in outside.stdout


def test_export_job_one_click_to_jetson_through_the_engine(engine_proc, sshd, jetson):
    """The whole path a user clicks: host added and trusted, a fine-tune, an export with host -> device figures."""
    from engine.api.protocol import NOT_FOUND, RpcError
    from tests.engine.test_compress_jobs import DIGITS_PARENT, finish

    c = engine_proc.client(timeout=150)
    host = jetson["host"]
    c.call("hosts.add", host=sshd.host("orin", python=host.python, workdir=host.workdir, role="jetson"))
    c.call("hosts.trust", name="orin", fingerprint=sshd.fingerprint)
    parent = finish(c, c.call("jobs.start", kind="train.finetune", spec={**DIGITS_PARENT, "max_steps": 8,
                                                                         "eval_every": 8})["id"])
    assert parent["state"] == "succeeded", parent
    spec = {"source_run": parent["id"], "formats": ["jetson"], "target": "orin_nano", "host": "orin",
            "benchmark_s": 2, "parity_samples": 16}
    with pytest.raises(RpcError) as err:
        c.call("jobs.start", kind="export.model", spec={**spec, "host": "no-such-jetson"})
    assert err.value.code == NOT_FOUND and "Hosts page" in str(err.value.data)
    job = finish(c, c.call("jobs.start", kind="export.model", spec=spec, name="to-orin")["id"])
    assert job["state"] == "succeeded", job
    result = json.loads((Path(job["run_dir"]) / "result.json").read_text())
    device = result["device"]
    assert device["host"] == "orin" and device["tensorrt"] == "10.3.0" and device["precision"] == "fp16"
    assert device["throughput_qps"] > 0 and 0 < device["latency_ms"]["median"] <= device["latency_ms"]["p99"]
    # Checked against the TensorRT the device reported, not the profile's guess.
    assert result["compat"]["ok"] and result["compat"]["tensorrt_version"] == "10.3.0"
    remote = Path(device["remote_dir"])
    assert (remote / "model.plan").is_file() and (remote / "manifest.json").is_file()
    # The device's output reached the run as it streamed, and the figures reach Compare.
    lines = c.call("jobs.logs", id=job["id"], tail=1000)["lines"]
    assert any("[orin build]" in line for line in lines) and any("Throughput" in line for line in lines)
    deployment = c.call("compress.variants", id=parent["id"])["parent_deployments"][0]
    assert deployment["job"] == job["id"] and deployment["device"]["throughput_qps"] == device["throughput_qps"]


FAKE_LLAMA_BENCH = Path(__file__).resolve().parent.parent / "fixtures" / "fake_llama_bench"


def tiny_chat_model(folder: Path) -> Path:
    """A 2-layer Llama with SmolLM2's tokenizer (llama.cpp's converter knows it), random weights drawn wide so
    every next token has a clear winner (the f16 file gives the same greedy tokens): a GGUF of 8 MB."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.export.metadata import tokenizer_files
    from engine.inference.models import model_folder

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.5)
    LlamaForCausalLM(config).save_pretrained(folder)
    for f in tokenizer_files(model_folder({"builtin": "smollm2-135m-instruct"})):
        shutil.copyfile(f, folder / f.name)
    return folder


@pytest.mark.timeout(300)
def test_a_language_model_one_click_to_jetson_builds_times_and_reports_tokens_per_s(engine_proc, sshd, jetson,
                                                                                       tmp_path):
    """A GGUF export with format jetson and a host: the bundle (the GGUF, llama.cpp's source, the scripts), copied
    over SSH, build_llama_cpp.sh finding the installed llama.cpp (here tests/fixtures/fake_llama_bench: a
    STAND-IN for the device's CUDA build that runs the real file through the real llama.cpp on this CPU),
    benchmark.sh's llama-bench JSON back as the device's figures."""
    bench = jetson["trtexec"].parent / "llama-bench"
    bench.write_text(f"#!{jetson['host'].python}\n" + FAKE_LLAMA_BENCH.read_text().split("\n", 1)[1])
    bench.chmod(0o755)
    model = tiny_chat_model(tmp_path / "tinysmol")
    c = engine_proc.client(timeout=150)
    host = jetson["host"]
    if not any(h["name"] == "orin" for h in c.call("hosts.list")["hosts"]):
        c.call("hosts.add", host=sshd.host("orin", python=host.python, workdir=host.workdir, role="jetson"))
        c.call("hosts.trust", name="orin", fingerprint=sshd.fingerprint)
    spec = {"model": {"path": str(model)}, "formats": ["gguf", "jetson"], "gguf_types": ["f16"],
            "target": "orin_nano", "host": "orin", "check_prompts": 2, "check_tokens": 4, "parity_samples": 2,
            "check_batch": 0, "archive": False}
    from tests.engine.test_compress_jobs import finish

    job = finish(c, c.call("jobs.start", kind="export.model", spec=spec, name="llm-to-orin")["id"])
    assert job["state"] == "succeeded", c.call("jobs.logs", id=job["id"], tail=40)["lines"]
    result = json.loads((Path(job["run_dir"]) / "result.json").read_text())
    bundle = result["formats"]["jetson"]
    names = set(bundle["files"])
    assert {"tinysmol-f16.gguf", "build_llama_cpp.sh", "benchmark.sh", "chat.sh", "README.md",
            "manifest.json"} <= names and bundle["gguf_type"] == "f16" and bundle["runtime"] == "llama.cpp"
    from engine.export import llm_formats

    if llm_formats.llama_source()[0] is not None:  # scripts/llama_cpp.sh keeps it: the device can build
        assert "llama.cpp-src.tar.gz" in names and bundle["has_source"]
    device = result["device"]
    assert device["host"] == "orin" and device["runtime"] == "llama.cpp" and device["gguf_type"] == "f16"
    assert device["tokens_per_s"] > 0 and device["prompt_tokens_per_s"] > 0 and device["ttft_ms"] > 0
    assert device["prompt_tokens"] == 128 and device["gen_tokens"] == 64 and "stand-in" in device["backends"]
    remote = Path(device["remote_dir"])
    assert (remote / "manifest.json").is_file() and json.loads((remote / "benchmark.json").read_text())
    lines = c.call("jobs.logs", id=job["id"], tail=1000)["lines"]
    assert any("[orin build] llama.cpp is installed" in line for line in lines), lines[-30:]
    assert any("[orin benchmark]" in line for line in lines)

    # On a device with neither llama.cpp nor cmake the build script says what to install (and builds nothing).
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    import subprocess
    import sys

    (bare / "python3").symlink_to(sys.executable)
    for tool in ("bash", "sha256sum", "head", "dirname", "tar", "mkdir", "rm"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)

    out = subprocess.run(["bash", str(remote / "build_llama_cpp.sh")], capture_output=True, text=True, timeout=60,
                         env={"PATH": str(bare), "HOME": str(tmp_path), "EMBER_LLAMA_CPP_DIR": str(tmp_path / "lc")})
    assert out.returncode == 3 and "cmake is missing" in out.stderr and "build-essential" in out.stderr, out
