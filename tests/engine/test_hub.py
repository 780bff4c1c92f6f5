"""Models from the Hugging Face Hub, against the Hub stand-in on 127.0.0.1 (tests/hub_standin.py).

Downloads with progress, resume after a dropped link and after a stop (HTTP Range, same sha256),
gated and unknown models, offline without the model, a cached model used offline, the cache's list
and delete, search, and the access token kept out of Ember's store, logs and audit rows.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES, MODEL_DOWNLOAD
from engine.api.protocol import NOT_FOUND, REMOTE_FAILED, RpcError
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process, wait_for
from tests.hub_standin import HubStandin, point_huggingface_hub_at

REPO = "acme/tiny-llama"
GATED = "acme/gated-llama"
GRANTED = "hf_granted_0123456789abcdef"
SECRET = "hf_NotForTheStore_9f8e7d6c5b4a"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """The built-in tiny Llama's files, written once: what the stand-in serves."""
    from engine.tasks.causal_lm import make_tiny_model_folder

    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture
def hub(tiny_model, tmp_path, monkeypatch):
    """The stand-in serving the tiny Llama (plain and gated), with HF_ENDPOINT and HF_HOME pointed at it
    for subprocesses (environment) and for this process (huggingface_hub reads both at import)."""
    standin = HubStandin()
    standin.add_folder(REPO, tiny_model, downloads=1234, likes=5, license="apache-2.0")
    standin.add_folder(GATED, tiny_model, gated="manual", granted={GRANTED}, license="llama3.1")
    standin.start()
    point_huggingface_hub_at(standin, tmp_path / "hf-home", monkeypatch)
    yield standin
    standin.stop()


@pytest.fixture
def engine(hub, ember_home):
    """An engine started after the Hub's environment is set, so it and its jobs use the stand-in."""
    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    yield eng
    eng.stop()
    kill_job_groups(ember_home.home)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def wait_final(c, job_id, timeout=120):
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j, timeout=timeout,
                    interval=0.1, what=f"job {job_id} to end")


def events(c, job_id, kind):
    return [e["data"] for e in c.call("events.query", topics=[f"run/{job_id}/{kind}"], limit=10_000)["events"]]


# ---------------------------------------------------------------- downloads


def test_download_job_reports_progress_and_fills_the_standard_cache(engine, hub, tiny_model):
    with engine.client() as c:
        job = c.call("jobs.start", kind=MODEL_DOWNLOAD, spec={"repo_id": REPO})
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-20:]
        progress = events(c, job["id"], "progress")
        total = sum(p.stat().st_size for p in tiny_model.iterdir())
        assert progress[0]["bytes_total"] == total and progress[-1]["bytes_done"] == total
        assert progress[-1]["fraction"] == 1.0
        assert all({"speed_bps", "eta_s", "message"} <= set(p) for p in progress)
        folder = Path(done["result"]["path"])
        assert folder.parent.parent.parent == Path(os.environ["HF_HOME"]) / "hub"  # the standard layout
        assert (folder.parent.parent / "refs" / "main").read_text() == folder.name == hub.repos[REPO].sha
        for f in tiny_model.iterdir():
            assert sha256(folder / f.name) == sha256(f)
        cached = c.call("models.list")["models"]
    assert [m["repo_id"] for m in cached] == [REPO]
    assert cached[0]["size_bytes"] == total and cached[0]["revisions"][0]["refs"] == ["main"]
    assert {r["method"] for r in hub.requests} == {"GET", "HEAD"}  # every request reached the stand-in


def test_a_dropped_link_is_resumed_with_a_range_request(hub, tiny_model):
    from engine.tasks import hub_models

    hub.drop_once(REPO, "model.safetensors")
    seen = []
    folder = hub_models.download(REPO, None, report=seen.append)
    gets = hub.file_requests("model.safetensors")
    assert [g["range"] for g in gets][0] is None
    offset = int(gets[1]["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < offset < (tiny_model / "model.safetensors").stat().st_size  # it continued, not restarted
    assert sha256(folder / "model.safetensors") == sha256(tiny_model / "model.safetensors")
    assert seen[-1]["bytes_done"] == seen[-1]["bytes_total"]
    # Plain HTTP to the stand-in only: model info, the file listing and the files, never a Xet token
    # (huggingface_hub may also read its registry of tool names from the same endpoint, once a day).
    assert [r["path"] for r in hub.requests if not r["path"].startswith((f"/api/models/{REPO}",
                                                                         f"/{REPO}/resolve/"))
            and r["path"] != "/api/agent-harnesses"] == []


def test_a_full_disk_is_found_before_the_first_byte(hub, monkeypatch):
    import shutil

    from engine.tasks import hub_models
    from engine.training.context import JobFailed

    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(10**9, 10**9 - 4096, 4096))
    with pytest.raises(JobFailed) as full:
        hub_models.download(REPO, None)
    assert "Not enough disk space to download acme/tiny-llama" in str(full.value)
    assert "HF_HOME" in full.value.hint
    assert not hub.file_requests("model.safetensors")  # nothing was fetched


def test_a_stopped_download_continues_from_its_partial_file(hub, tiny_model):
    from huggingface_hub import constants

    from engine.tasks import hub_models

    blobs = Path(constants.HF_HUB_CACHE) / "models--acme--tiny-llama" / "blobs"
    weights_etag = hub.repos[REPO].etag("model.safetensors")
    partial = blobs / f"{weights_etag}.incomplete"
    assert hub_models.download(REPO, None, should_stop=lambda: partial.exists() and partial.stat().st_size > 0) is None
    kept = partial.stat().st_size
    assert 0 < kept < (tiny_model / "model.safetensors").stat().st_size
    assert hub_models.cached_folder(REPO, None) is None  # not usable half-way
    folder = hub_models.download(REPO, None)
    assert hub.file_requests("model.safetensors")[-1]["range"] == f"bytes={kept}-"
    assert sha256(folder / "model.safetensors") == sha256(tiny_model / "model.safetensors")
    assert not partial.exists() and hub_models.cached_folder(REPO, None) == folder


def test_a_stopped_download_job_resumes_where_it_stopped(engine, hub, tiny_model):
    hub.throttle_bps = 400_000  # the weights take about 2 s: time to stop half way
    size = (tiny_model / "model.safetensors").stat().st_size
    with engine.client() as c:
        job = c.call("jobs.start", kind=MODEL_DOWNLOAD, spec={"repo_id": REPO})
        wait_for(lambda: any(p["file"] == "model.safetensors" and p["bytes_done"] > p["bytes_total"] - size
                             for p in events(c, job["id"], "progress")), timeout=60, what="the weights to start")
        c.call("jobs.stop", id=job["id"])
        assert wait_final(c, job["id"])["state"] == "stopped"
        partial = c.call("models.list")["models"][0]["partial_bytes"]
        assert 0 < partial < size
        hub.throttle_bps = None
        c.call("jobs.resume", id=job["id"])
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-20:]
        ranges = [g["range"] for g in hub.file_requests("model.safetensors")]
        assert ranges[0] is None and ranges[-1] is not None
        assert int(ranges[-1].removeprefix("bytes=").rstrip("-")) >= partial
        assert sha256(Path(done["result"]["path"]) / "model.safetensors") == sha256(tiny_model / "model.safetensors")


def test_cli_downloads_lists_and_saves_the_token(engine, hub, capsys, monkeypatch):
    import io

    from huggingface_hub import constants

    from engine.cli.main import main

    assert main(["models", "download", REPO, "--quiet"]) == 0
    assert main(["models", "list"]) == 0
    listed = capsys.readouterr().out
    assert REPO in listed and "(main)" in listed and str(Path(os.environ["HF_HOME"]) / "hub") in listed
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    assert main(["hub", "login"]) == 0
    said = capsys.readouterr().out
    assert "token saved" in said and SECRET not in said and Path(constants.HF_TOKEN_PATH).read_text() == SECRET
    assert main(["models", "search", "llama"]) == 0
    found = capsys.readouterr().out
    assert "1,234" in found and "apache-2.0" in found and "(cached)" in found
    assert main(["models", "delete", REPO]) == 0 and main(["models", "list"]) == 0
    assert "no models in the Hugging Face cache" in capsys.readouterr().out


def test_gated_model_answers_with_the_page_to_request_access(hub):
    from engine.daemon import hub as engine_hub
    from engine.tasks import hub_models
    from engine.training.context import JobFailed

    page = f"{hub.url}/{GATED}"
    with pytest.raises(JobFailed) as no_token:
        hub_models.download(GATED, None)
    assert "gated" in str(no_token.value) and "no Hugging Face access token" in str(no_token.value)
    assert page in no_token.value.hint
    engine_hub.save_token("hf_not_granted_123")
    with pytest.raises(JobFailed) as refused:
        hub_models.download(GATED, None)
    assert "has not been granted access" in str(refused.value) and page in refused.value.hint
    statuses = [r for r in hub.requests if r["path"].startswith(f"/{GATED}/resolve/")]
    assert [r["token"] for r in statuses] == [False, True]  # 401 without a token, then 403 with one
    engine_hub.save_token(GRANTED)
    assert (hub_models.download(GATED, None) / "config.json").is_file()


def test_unknown_model_and_revision_say_so(hub):
    from engine.tasks import hub_models
    from engine.training.context import JobFailed

    with pytest.raises(JobFailed, match=f"No model acme/missing on the Hugging Face Hub \\({hub.url}\\)"):
        hub_models.download("acme/missing", None)
    with pytest.raises(JobFailed, match="has no revision 'v9'"):
        hub_models.download(REPO, "v9")


def test_offline_without_the_model_says_what_to_do(hub, monkeypatch):
    from huggingface_hub import constants

    from engine.tasks import hub_models
    from engine.training.context import JobFailed

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(JobFailed) as offline:
        hub_models.download(REPO, None)
    assert "not in the Hugging Face cache" in str(offline.value) and "HF_HUB_OFFLINE" in str(offline.value)
    assert "model.path" in offline.value.hint and "HF_HUB_OFFLINE=1" in offline.value.hint
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub.stop()  # the link is down
    t0 = time.monotonic()
    folder, issues = hub_models.resolve(REPO, None)
    assert folder is None and time.monotonic() - t0 < 10
    assert "cannot be reached" in issues[0].message and "copy the model folder" in issues[0].hint


def test_cached_model_is_used_offline_by_a_fine_tunes_checks(hub, monkeypatch):
    from huggingface_hub import constants

    from engine.api.specs import validate_spec
    from engine.tasks import causal_lm, hub_models

    folder = hub_models.download(REPO, None)
    hub.stop()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    requests = len(hub.requests)
    spec = validate_spec("train.finetune", {"task": "causal_lm", "model": {"hub": REPO}, "max_steps": 2})
    assert causal_lm.resolve_model_dir(spec) == (folder, [])
    assert causal_lm.validate(spec) == []
    assert len(hub.requests) == requests  # nothing was asked of the network


def test_fine_tune_downloads_its_hub_model_first_then_trains(engine, hub):
    spec = {"task": "causal_lm", "model": {"hub": REPO}, "method": {"kind": "lora"}, "batch_size": 4,
            "max_steps": 2, "eval_every": 2, "checkpoint_every": 2, "data": {"max_length": 64}}
    with engine.client() as c:
        assert c.call("jobs.check", kind="train.finetune", spec=spec)["issues"] == []  # downloadable: no issue
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"], timeout=240)
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        progress = [p for p in events(c, job["id"], "progress") if p.get("stage") == "download"]
        assert progress and progress[-1]["bytes_done"] == progress[-1]["bytes_total"] > 0
        hub_event = events(c, job["id"], "hub_model")[0]
        assert hub_event["repo_id"] == REPO and hub_event["commit"] == hub.repos[REPO].sha
        assert len(events(c, job["id"], "train")) == 2


def test_checks_before_launch_report_gated_and_offline(engine, hub):
    with engine.client() as c:
        spec = {"task": "causal_lm", "model": {"hub": GATED}, "max_steps": 2}
        issues = c.call("jobs.check", kind="train.finetune", spec=spec)["issues"]
        assert any("gated" in i["message"] and f"{hub.url}/{GATED}" in i["hint"] for i in issues)
        hub.stop()
        spec["model"] = {"hub": REPO}
        issues = c.call("jobs.check", kind="train.finetune", spec=spec)["issues"]
        assert any("cannot be reached" in i["message"] for i in issues)


# ---------------------------------------------------------------- the cache, search and the token


def test_cache_list_and_delete(engine, hub):
    from engine.tasks import hub_models

    hub_models.download(REPO, None)
    with engine.client() as c:
        models = c.call("models.list")["models"]
        assert models[0]["repo_id"] == REPO and models[0]["last_used"] > 0
        assert Path(models[0]["revisions"][0]["path"], "config.json").is_file()
        with pytest.raises(RpcError) as busy:
            c.call("models.delete", repo_id="acme/never-downloaded")
        assert busy.value.code == NOT_FOUND
        freed = c.call("models.delete", repo_id=REPO)["freed_bytes"]
        assert freed >= models[0]["size_bytes"] > 0
        assert c.call("models.list")["models"] == []
        audit = c.call("audit.list", action="models.delete")["records"]
        assert [(a["target"], a["ok"]) for a in audit] == [(REPO, True), ("acme/never-downloaded", False)]


def test_search_shows_downloads_licence_and_gated_and_fails_fast_offline(engine, hub):
    with engine.client() as c:
        found = {m["repo_id"]: m for m in c.call("models.search", text="llama")["models"]}
        assert found[REPO]["downloads"] == 1234 and found[REPO]["license"] == "apache-2.0"
        assert found[GATED]["gated"] == "manual" and found[GATED]["license"] == "llama3.1"
        assert found[REPO]["size_bytes"] > 0 and found[REPO]["cached"] is False
        hub.stop()
        t0 = time.monotonic()
        with pytest.raises(RpcError) as offline:
            c.call("models.search", text="llama")
        assert offline.value.code == REMOTE_FAILED and time.monotonic() - t0 < 10
        assert "cannot be reached" in offline.value.message


def test_the_token_is_saved_for_huggingface_hub_and_never_stored_by_ember(engine, hub, ember_home):
    from huggingface_hub import constants
    from huggingface_hub.utils import get_token

    from engine.api.audit_rows import row

    with engine.client() as c:
        assert c.call("hub.status")["token"]["set"] is False
        status = c.call("hub.login", token=SECRET)
        assert status["token"] == {"set": True, "source": "file", "path": constants.HF_TOKEN_PATH}
        assert SECRET not in repr(status)
        path = Path(constants.HF_TOKEN_PATH)
        assert path.read_text() == SECRET and get_token() == SECRET  # where huggingface_hub reads it
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        c.call("hub.login", token=GRANTED)
        job = c.call("jobs.start", kind=MODEL_DOWNLOAD, spec={"repo_id": GATED})  # the token opens the gate
        assert wait_final(c, job["id"])["state"] == "succeeded"
        audit = c.call("audit.list", action="hub.*")["records"]
        assert [a["params"] for a in audit] == [{"token": "***"}, {"token": "***"}]
        assert all(SECRET not in ",".join(row(a)) for a in audit)
        c.call("hub.logout")
        assert not path.exists() and c.call("hub.status")["token"]["set"] is False
        run_dir = Path(c.call("jobs.get", id=job["id"])["run_dir"])
    assert any(r["token"] for r in hub.requests if r["path"].startswith(f"/{GATED}/resolve/"))
    engine.stop()
    for where in [*ember_home.home.rglob("*")]:
        if where.is_file():
            data = where.read_bytes()
            assert SECRET.encode() not in data and GRANTED.encode() not in data, where
    assert (run_dir / "events.jsonl").is_file()


def test_spec_takes_a_hub_id_with_revision_and_refuses_two_models():
    from engine.api.specs import SpecError, validate_spec

    spec = validate_spec("train.finetune", {"task": "causal_lm",
                                            "model": {"hub": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main"}})
    assert spec.model_name() == "Qwen/Qwen2.5-0.5B-Instruct"
    for bad in ({"hub": "Qwen/Qwen2.5 0.5B"}, {"hub": "a/b/c"}, {"hub": REPO, "path": "/models/x"},
                {"revision": "main"}):
        with pytest.raises(SpecError):
            validate_spec("train.finetune", {"task": "causal_lm", "model": bad})
    with pytest.raises(SpecError):
        validate_spec("train.finetune", {"task": "image_classification", "model": {"hub": REPO}})
    with pytest.raises(SpecError):
        validate_spec(MODEL_DOWNLOAD, {"repo_id": "../etc"})
