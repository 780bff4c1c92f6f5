"""A server on an SSH host (a real sshd on loopback): the model copied there, the server started detached, reached
through the engine's forwarded port with the official openai client, stopped, and nothing left running."""

from __future__ import annotations

import socket
import urllib.parse
from pathlib import Path

import openai
import pytest

from engine.api.specs import SpecError, validate_spec
from engine.api.train_spec import TrainSpec
from engine.launch import node_ctl
from engine.tasks import causal_lm
from tests.conftest import wait_for
from tests.engine.test_playground import QUESTION, direct_greedy
from tests.remote.test_multinode import _kill_leftovers, _trusted_hosts, _wait_state

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _serving(client, run_id: str) -> list[dict]:
    return [e["data"] for e in client.call("events.query", topics=[f"run/{run_id}/serving"], limit=1000)["events"]]


def test_serve_on_a_host_through_a_forwarded_port_then_stop_leaves_nothing(engine_proc, sshd, tmp_path):
    client = engine_proc.client(timeout=120)
    _trusted_hosts(client, sshd, tmp_path, names=("gpu-box",))
    folder, issues = causal_lm.resolve_model_dir(TrainSpec(task="causal_lm", model={"builtin": "tiny-llama"}))
    assert folder is not None and not issues
    job = client.call("jobs.start", kind="serve.model", name="on-gpu-box",
                      spec={"model": {"path": str(folder)}, "host": "gpu-box", "served_name": "tiny"})
    run_id = job["id"]
    try:
        seen = wait_for(lambda: [e for e in _serving(client, run_id) if e.get("url")], timeout=180, interval=0.5,
                        what="the server's address")
        first = seen[0]
        assert first["host"] == "gpu-box" and first["url"] != first["remote_url"]
        assert urllib.parse.urlsplit(first["url"]).hostname == "127.0.0.1"
        # The model was copied into the job's folder on the host, and the server runs there.
        node = client.call("jobs.get", id=run_id)
        assert node["state"] == "running"
        remote_dir = Path(tmp_path / "gpu-box" / "runs" / run_id / "node0")
        assert (remote_dir / "inputs" / folder.name / "config.json").is_file()
        assert node_ctl.procs({"run_id": run_id})["pids"]

        ai = openai.OpenAI(base_url=first["url"], api_key="unused", max_retries=0, timeout=120)
        assert [m.id for m in ai.models.list().data] == ["tiny"]
        reply = ai.chat.completions.create(model="tiny", messages=QUESTION, temperature=0, max_tokens=8)
        expected, n = direct_greedy(QUESTION, 8)
        assert reply.choices[0].message.content == expected and reply.usage.completion_tokens == n
        wait_for(lambda: any((e.get("requests") or 0) >= 1 for e in _serving(client, run_id)), timeout=30,
                 interval=0.5, what="the request in the figures")
        logs = "\n".join(client.call("jobs.logs", id=run_id)["lines"])
        assert "serving tiny" in logs

        client.call("jobs.stop", id=run_id)
        done = _wait_state(client, run_id, ("stopped", "failed", "cancelled", "succeeded"), timeout=120)
        assert done["state"] == "stopped", done.get("error")
        wait_for(lambda: not node_ctl.procs({"run_id": run_id})["pids"], timeout=30, interval=0.5,
                 what="the server's processes to end")
        port = urllib.parse.urlsplit(first["url"]).port
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the forward closed with the job
    finally:
        assert _kill_leftovers(run_id) == []


def test_a_run_is_served_on_a_host_only_as_an_exported_folder():
    with pytest.raises(SpecError, match="export it as hf"):
        validate_spec("serve.model", {"model": {"run": "r1"}, "host": "gpu-box"})
