"""Custom model code (model.code): confirmed before it runs, and run in the job process only.

A real engine, a real job process and a real tiny CNN for the digits: without the confirmed
hash jobs.start is refused with CONFIRMATION_REQUIRED and its facts; with it the job trains;
a file changed after confirmation is refused by the job itself; a syntax error is reported
with its line. The file writes a marker with its pid when imported: it is the job's pid,
never the engine's (and the engine's own modules never include it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES
from engine.api.protocol import CONFIRMATION_REQUIRED
from engine.cli.client import RpcError
from tests.conftest import wait_for

CNN = '''\
"""A tiny CNN for the digits, written as a user would."""
import os
from pathlib import Path

import torch
from torch import nn

Path({marker!r}).open("a").write(f"{{os.getpid()}}\\n")  # who imported this file


class TinyCNN(nn.Module):
    def __init__(self, num_labels):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, num_labels)

    def forward(self, pixel_values):
        return self.head(self.features(pixel_values))


def build_model(num_labels, spec):
    assert spec.task == "image_classification"
    return TinyCNN(num_labels)
'''


def _spec(code: Path, sha: str | None = None, steps: int = 3) -> dict:
    model = {"code": str(code)} | ({"code_sha256": sha} if sha else {})
    return {"task": "image_classification", "model": model, "method": {"kind": "full"}, "device": "cpu",
            "batch_size": 8, "max_steps": steps, "eval_every": steps, "checkpoint_every": steps,
            "memory_every": steps}


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finish(client, job_id: str, timeout: float = 90.0) -> dict:
    return wait_for(lambda: (j := client.call("jobs.get", id=job_id))["state"] in
                    FINAL_STATES and j, timeout=timeout, what="the job to end")


def test_code_runs_only_after_confirmation_and_only_in_the_job_process(engine_proc, tmp_path):
    marker = tmp_path / "imported_by.txt"
    code = tmp_path / "my_cnn.py"
    sha = _write(code, CNN.format(marker=str(marker)))
    c = engine_proc.client()
    try:
        check = c.call("jobs.check", kind="train.finetune", spec=_spec(code))
        confirm = [i for i in check["issues"] if i.get("field") == "model.code"]
        assert confirm and confirm[0]["confirmation"]["sha256"] == sha

        with pytest.raises(RpcError) as refused:
            c.call("jobs.start", kind="train.finetune", spec=_spec(code))
        err = refused.value
        assert err.code == CONFIRMATION_REQUIRED
        assert err.data["sha256"] == sha and err.data["size"] == code.stat().st_size
        assert err.data["path"] == str(code.resolve()) and "class TinyCNN" in err.data["preview"]
        assert c.call("jobs.list")["jobs"] == []  # nothing was queued
        assert not marker.exists()  # nor was the file run, by the engine or the check subprocess

        with pytest.raises(RpcError) as wrong:
            c.call("jobs.start", kind="train.finetune", spec=_spec(code, "0" * 64))
        assert wrong.value.code == CONFIRMATION_REQUIRED and "changed" in wrong.value.message

        job = c.call("jobs.start", kind="train.finetune", spec=_spec(code, sha))
        done = _finish(c, job["id"])
        assert done["state"] == "succeeded", done["error"]
        metrics = c.call("jobs.metrics", id=job["id"], kind="train")["metrics"]
        assert sorted({m["step"] for m in metrics if m["name"] == "loss"}) == [1, 2, 3]
        run_dir = Path(done["run_dir"])
        assert (run_dir / "model" / "weights.safetensors").is_file()
        assert json.loads((run_dir / "model" / "ember_model.json").read_text())["model"]["code_sha256"] == sha

        pids = [int(x) for x in marker.read_text().split()]
        engine_pid = c.call("engine.status")["pid"]
        assert pids == [done["pid"]], "the file ran once, in the job process"
        assert engine_pid not in pids and engine_proc.proc.pid not in pids
    finally:
        c.close()


def test_file_changed_after_confirmation_is_refused_and_a_syntax_error_has_its_line(engine_proc, tmp_path):
    marker = tmp_path / "imported_by.txt"
    code = tmp_path / "my_cnn.py"
    sha = _write(code, CNN.format(marker=str(marker)))
    c = engine_proc.client()
    try:
        # The engine accepts the confirmed hash; the file changes before the job process (seconds to
        # import torch) reads it: the job hashes again and refuses, without running a line of it.
        job = c.call("jobs.start", kind="train.finetune", spec=_spec(code, sha, steps=1))
        code.write_text(code.read_text() + "\nprint('added later')\n", encoding="utf-8")
        # Beside it, a confirmed file with a syntax error: the job reports the line.
        bad = tmp_path / "bad.py"
        sha_bad = _write(bad, "import torch\n\n\ndef build_model(num_labels:\n    return torch.nn.Linear(3, 2)\n")
        syntax = c.call("jobs.start", kind="train.finetune", spec=_spec(bad, sha_bad, steps=1))
        done = _finish(c, job["id"])
        assert done["state"] == "failed"
        assert "changed after you confirmed it; confirm again" in done["error"]["message"]
        assert not marker.exists()
        failed = _finish(c, syntax["id"])
        assert failed["state"] == "failed" and "Syntax error" in failed["error"]["message"]
        assert "line 4" in failed["error"]["message"], failed["error"]
        with pytest.raises(RpcError) as refused:  # and the engine refuses the old hash from now on
            c.call("jobs.start", kind="train.finetune", spec=_spec(code, sha))
        assert refused.value.code == CONFIRMATION_REQUIRED and refused.value.data["sha256"] != sha
    finally:
        c.close()


def test_ember_run_asks_and_takes_trust_code(engine_proc, tmp_path):
    from engine.api.custom_code import start_confirmed

    code = tmp_path / "my_cnn.py"
    sha = _write(code, CNN.format(marker=str(tmp_path / "m.txt")))
    printed: list[str] = []
    c = engine_proc.client()
    try:
        assert start_confirmed(c, "train.finetune", _spec(code), "x", None, ask=lambda _q: "n",
                               out=printed.append) is None
        assert sha in printed[0] and "class TinyCNN" in printed[0] and c.call("jobs.list")["jobs"] == []
        assert start_confirmed(c, "train.finetune", _spec(code), "x", "f" * 64, out=printed.append) is None
        job = start_confirmed(c, "train.finetune", _spec(code), "x", None, ask=lambda _q: "y", out=printed.append)
        assert job["spec"]["model"]["code_sha256"] == sha
        c.call("jobs.cancel", id=job["id"])
        job = start_confirmed(c, "train.finetune", _spec(code), "x", sha.upper(), out=printed.append)
        assert job["spec"]["model"]["code_sha256"] == sha
        c.call("jobs.cancel", id=job["id"])
    finally:
        c.close()


BAD = {
    "returns a tensor": ("import torch\ndef build_model(num_labels):\n    return torch.zeros(3)\n",
                         "returned Tensor, not a torch.nn.Module"),
    "forward fails": ("import torch\ndef build_model(num_labels):\n    return torch.nn.Linear(5, num_labels)\n",
                      "forward failed on one batch (pixel_values [2, 3, 32, 32]"),
    "wrong logits": ("import torch\nclass build_model(torch.nn.Module):\n    def __init__(self, num_labels):\n"
                     "        super().__init__()\n        self.f = torch.nn.Flatten()\n"
                     "        self.lin = torch.nn.Linear(3072, 3)\n"
                     "    def forward(self, pixel_values):\n        return self.lin(self.f(pixel_values))\n",
                     "expected logits of shape [2, 10]"),
    "raises at import": ("x = 1\nraise RuntimeError('no GPU here')\n", "failed (line 2): RuntimeError: no GPU here"),
    "syntax error": ("def build_model(:\n    pass\n", "Syntax error in"),
    "entry missing": ("import torch\ndef make(num_labels):\n    return torch.nn.Linear(3, num_labels)\n",
                      "build_model is not defined in"),
    "unknown argument": ("import torch\ndef build_model(num_labels, hidden):\n    return None\n",
                         "needs argument(s) hidden"),
}


def test_job_side_messages_for_bad_files(ember_home, tmp_path):
    """What the job process says (engine/tasks/custom_model.py), one clear message per mistake."""
    from engine.api.train_spec import TrainSpec
    from engine.tasks import get_task
    from engine.tasks.custom_model import build
    from engine.training.context import JobFailed

    task = get_task("image_classification")
    data = None
    for what, (text, expected) in BAD.items():
        path = tmp_path / f"{what.replace(' ', '_')}.py"
        spec = TrainSpec.model_validate(_spec(path, _write(path, text)))
        data = data or task.load_data(spec)
        with pytest.raises(JobFailed) as failed:
            task.build_model(spec, data)
        assert expected in str(failed.value), (what, str(failed.value))
    missing = TrainSpec.model_validate(_spec(tmp_path / "gone.py", "a" * 64))
    with pytest.raises(JobFailed, match="missing"):
        build(missing, data)
