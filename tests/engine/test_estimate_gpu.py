"""Estimated against measured peak memory of a real CUDA run (the allocator's peak).

Skipped without a GPU; on a GPU machine: ``pytest -m gpu -s tests/engine/test_estimate_gpu.py``.
"""

from __future__ import annotations

import json
import os

import pytest

from engine.api.train_spec import TrainSpec
from engine.estimate.memory import estimate, estimated_peak, measured_peak
from tests.engine.test_estimate import facts_in_fresh_process, fresh_process, show

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
CUDA_BOUND = 0.15  # the acceptance target for CUDA runs
RUN = {"task": "text_classification", "device": "cuda", "precision": "bf16", "max_steps": 6, "eval_every": 100,
       "checkpoint_every": 100, "memory_every": 1, "data": {"max_length": 32}}  # tickets are 12-40 tokens: batches fill 32


# A machine without the built-in model's package can point at a copy of its folder.
if os.environ.get("EMBER_GPU_MINILM"):
    RUN["model"] = {"path": os.environ["EMBER_GPU_MINILM"]}


@pytest.mark.parametrize("method,batch", [("lora", 32), ("full", 32)])
def test_estimated_peak_against_a_real_cuda_run(method, batch, ember_home, tmp_path):
    doc = {**RUN, "method": {"kind": method}, "batch_size": batch}
    config = tmp_path / "spec.yaml"
    config.write_text(json.dumps(doc))
    facts = facts_in_fresh_process(doc)
    run_dir = tmp_path / "run"
    proc = fresh_process(["-m", "engine.recipes.finetune", "--config", str(config), "--run-dir", str(run_dir)], 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    memory = [e for e in events if e.get("kind") == "memory"]
    assert memory and memory[-1]["ranks"][0]["device"].startswith("cuda")
    measured = measured_peak(memory)
    from engine.estimate import machine

    reply = estimate(TrainSpec.model_validate(doc), facts, machine.info(tmp_path))
    est = estimated_peak(reply)
    speed = sorted(e["samples_per_s"] for e in events if e.get("kind") == "train")
    show(f"MiniLM {method} bf16 batch {batch} on {reply['devices'][0]['name']}: estimated peak "
          f"{est / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB (max_memory_allocated), ratio "
          f"{est / measured:.3f}; parts {reply['devices'][0]['parts']}; samples/s estimated "
          f"{reply['throughput']['samples_per_s']}, measured {speed[len(speed) // 2]:.1f} (median)")
    assert abs(est / measured - 1) <= CUDA_BOUND

