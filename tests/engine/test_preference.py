"""Preference tuning (objective dpo, orpo, kto): spec rules, data rows, TRL's numbers, a real run."""

import contextlib
import json
import math

import pytest
from pydantic import ValidationError

from engine.api.train_spec import TrainSpec
from engine.tasks import causal_lm as lm
from engine.tasks import preference as pref
from engine.tasks import preference_data as pdata
from engine.tasks import preference_loss as ploss
from engine.tasks import task_for
from engine.training import dist

WORLD = dist.World(0, 0, 1, "cpu", "test")


def spec_of(**fields):
    return TrainSpec.model_validate({"task": "causal_lm", "objective": "dpo", "batch_size": 4, **fields})


# ---------------------------------------------------------------- the spec


@pytest.mark.parametrize(("fields", "says"), [
    ({"task": "text_classification"}, "objective dpo needs task causal_lm"),
    ({"distill": {"teacher_run": "r1"}, "method": {"kind": "full"}}, "does not work with distill"),
    ({"data": {"packing": True}}, "turn data.packing off"),
    ({"objective": "kto", "batch_size": 1}, "objective kto needs batch_size 2 or more"),
])
def test_the_spec_refuses_what_a_preference_objective_cannot_do(fields, says):
    with pytest.raises(ValidationError) as exc:
        spec_of(**fields)
    assert says in str(exc.value)


def test_options_have_bounds_and_the_default_data_follows_the_objective():
    with pytest.raises(ValidationError):
        spec_of(preference={"beta": 0})
    with pytest.raises(ValidationError):
        spec_of(preference={"loss_type": "exo_pair"})
    assert spec_of().data_name() == "tiny-preferences"
    assert spec_of(objective="sft").data_name() == "tiny-instructions"
    assert TrainSpec(task="causal_lm").objective == "sft"
    assert task_for(spec_of()) is pref and task_for(spec_of(objective="sft")) is lm


# ---------------------------------------------------------------- rows


def test_every_bad_row_is_reported_with_its_line_and_a_fix(tmp_path):
    rows = [
        '\ufeff{"prompt": "Hi?", "chosen": "Hello.", "rejected": "Go away."}',  # a BOM, then a good row
        '{"prompt": "Hi?", "chosen": "Hello."}',
        'not json',
        '{"prompt": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "x"}], '
        '"chosen": "a", "rejected": "b"}',
        '{"prompt": "Hi?", "chosen": [{"role": "user", "content": "a"}], "rejected": "b"}',
        '{"prompt": "Hi?", "chosen": "  ", "rejected": "b"}',
        '{"prompt": "Hi?", "completion": "Hello.", "label": true}',
        '',
        '{"prompt": [{"role": "robot", "content": "Hi?"}], "chosen": "a", "rejected": "b"}',
    ]
    path = tmp_path / "prefs.jsonl"
    path.write_bytes("\n".join(rows).encode() + b"\n\xff\xfe\n")
    good, issues = pdata.read(path, "dpo")
    assert [line for line, _ in good] == [1]
    found = {i.line: i.message for i in issues}
    assert found == {
        2: 'missing field "rejected"',
        3: "invalid JSON: Expecting value (column 1)",
        4: "the last message of \"prompt\" is the assistant's; the prompt must end before the answer",
        5: 'chosen[0] has role "user": an answer holds assistant messages only',
        6: '"chosen" is empty',
        7: 'missing field "chosen" and "rejected" (a "completion" and "label" row is for objective kto)',
        9: 'unknown role "robot" in prompt[0] (use system, user or assistant)',
        10: "line is not valid UTF-8 (byte 1)",
    }
    assert all(i.file == str(path) for i in issues)
    assert all('"chosen"' in i.hint for i in issues if i.line != 10)
    kto, kto_issues = pdata.read(path, "kto")
    assert [line for line, _ in kto] == [1, 7]  # a pair is a kto row too
    bad_label = tmp_path / "kto.jsonl"
    bad_label.write_text('{"prompt": "Hi?", "completion": "Hello.", "label": "yes"}\n')
    assert pdata.read(bad_label, "kto")[1][0].message == "\"label\" must be true or false, not 'yes'"


def test_validate_reports_rows_whose_prompt_fills_max_length(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"prompt": "word " * 40, "chosen": "a", "rejected": "b"}) + "\n" +
                    json.dumps({"prompt": "Hi?", "chosen": "Hello.", "rejected": "Go away."}) + "\n")
    issues = pref.validate(spec_of(data={"path": str(path), "val_path": str(path), "max_length": 24}))
    assert {i.line for i in issues} == {1}
    assert "data.max_length is 24" in issues[0].message and "raise data.max_length" in issues[0].hint


def test_the_builtin_pairs_share_their_prompt_tokens_and_kto_unpairs_them():
    data = pref.load_data(spec_of())
    assert data.info["train_size"] == 225 and data.info["val_size"] == 50 and data.info["truncated_rows"] == 0
    tok = lm.load_tokenizer(lm.ensure_tiny_llama())
    row = data.train[0]
    prompt = tok.decode(row["prompt_ids"])
    assert prompt.startswith("<s>") and prompt.endswith("### Assistant:\n")
    assert tok.decode(row["chosen_ids"]).endswith("</s>") and tok.decode(row["rejected_ids"]).endswith("</s>")
    batch = data.collate([data.train[i] for i in range(3)])
    assert batch["input_ids"].shape[0] == 6
    answer = batch["labels"] != -100
    assert int(answer[0].sum()) == len(row["chosen_ids"]) and int(answer[3].sum()) == len(row["rejected_ids"])
    assert len(data.val_messages) == 50 and data.val_messages[0][-1]["role"] == "assistant"  # the chosen answers
    kto = pref.load_data(spec_of(objective="kto"))
    assert len(kto.val_messages) == 50  # the desirable completions
    assert kto.info["train_size"] == 450 and kto.info["desirable"] == kto.info["undesirable"] == 225
    first = kto.train[0]
    assert first["kl_completion_ids"] == kto.train[3]["completion_ids"]  # rotated within its group of 4


def test_the_wizard_preview_reads_preference_rows(tmp_path):
    from engine.preflight.data import inspect_data

    shown = inspect_data(spec_of(), n=2)
    assert shown["columns"] == ["line", "prompt", "chosen", "rejected"] and len(shown["rows"]) == 2
    assert (shown["n_train"], shown["n_val"], shown["issues"]) == (225, 50, [])
    path = tmp_path / "prefs.jsonl"
    path.write_text('{"prompt": "Hi?", "chosen": "Hello.", "rejected": "Go away."}\n{"prompt": "Hi?"}\n')
    kto = inspect_data(spec_of(objective="kto", data={"path": str(path)}), n=5)
    assert kto["columns"] == ["line", "prompt", "completion", "label"]
    assert [r["label"] for r in kto["rows"]] == ["true", "false"]
    assert [(i["field"], i["line"]) for i in kto["issues"]] == [("data.path", 2)]


# ---------------------------------------------------------------- the reference


def test_lora_reference_equals_the_policy_with_its_adapters_disabled(tmp_path):
    from engine.training import methods

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join((pdata.DATA_DIR / "train.jsonl").read_text().splitlines(keepends=True)[:12]))
    spec = spec_of(method={"kind": "lora"}, data={"path": str(path), "val_fraction": 0.5})
    data = pref.load_data(spec)
    model = pref.build_model(spec, data)
    pref.prepare_reference(model, data, spec, WORLD, contextlib.nullcontext)
    assert all("ref" in r for r in data.train.rows) and all("ref" in r for r in data.val.rows)
    import torch

    torch.manual_seed(0)  # LoRA's A matrices: random; how far the policy moves below must not hang on what ran before
    model = methods.apply(model, spec, pref)

    with torch.no_grad():
        for p in model.parameters():  # move the adapters away from zero: the policy now differs from the base
            if p.requires_grad:
                p.add_(0.05)
        batch = data.collate([data.val[i] for i in range(4)])
        loss, _ = pref.forward(model.eval(), batch)
        with model.disable_adapter():
            base = ploss.answer_logps(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert torch.allclose(base, batch["ref_logps"], atol=1e-4)
    assert abs(float(loss) - math.log(2)) > 1e-3


def test_prompt_tuning_learns_against_the_model_without_its_virtual_tokens(tmp_path):
    import torch

    from engine.training import methods

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join((pdata.DATA_DIR / "train.jsonl").read_text().splitlines(keepends=True)[:8]))
    spec = spec_of(method={"kind": "prompt_tuning", "num_virtual_tokens": 4}, data={"path": str(path)})
    data = pref.load_data(spec)
    model = pref.build_model(spec, data)
    batch = data.collate([data.train[i] for i in range(3)])
    with torch.no_grad():
        base = ploss.answer_logps(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    pref.prepare_reference(model, data, spec, WORLD, contextlib.nullcontext)
    batch = data.collate([data.train[i] for i in range(3)])
    assert torch.allclose(batch["ref_logps"], base, atol=1e-4)
    model = methods.apply(model, spec, pref)
    loss, stats = pref.forward(model, batch)
    loss.backward()
    prompts = [p for p in model.parameters() if p.requires_grad]
    assert prompts and all(p.grad is not None and p.grad.abs().sum() > 0 for p in prompts)
    assert math.isfinite(float(loss)) and stats["samples"] == 3


# ---------------------------------------------------------------- TRL's numbers


def _models(seed):
    """The built-in tiny-llama as the reference, and a perturbed copy as the policy (so the two differ)."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = lm.ensure_tiny_llama()

    def load(noise):
        m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        if noise:
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * 0.02)
        return m.eval()

    return load(True), load(False), lm.load_tokenizer(folder)


def _rows(n):
    with open(pdata.DATA_DIR / "train.jsonl", encoding="utf-8") as f:
        return [(i + 1, pdata.parse_pair(json.loads(line))[0]) for i, line in enumerate(f) if i < n]


def _ember_loss(policy, ref, collate, rows):
    import torch

    with torch.no_grad():
        refs = pref._reference_scores(ref, collate([dict(r) for r in rows])) if ref is not None else None
        batch = collate([dict(r, ref=s) for r, s in zip(rows, refs, strict=True)] if refs else rows)
        return float(pref.forward(policy, batch)[0])


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_dpo_loss_equals_trls(tmp_path, loss_type):
    import torch
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    policy, ref, tok = _models(1)
    rows = _rows(6)
    args = DPOConfig(output_dir=str(tmp_path), beta=0.1, loss_type=[loss_type], max_length=128, report_to=[],
                     per_device_train_batch_size=6, use_cpu=True, precompute_ref_log_probs=False)
    trainer = DPOTrainer(model=policy, ref_model=ref, args=args, processing_class=tok,
                         train_dataset=Dataset.from_list([r for _, r in rows]))  # the chat form of every row
    ours, issues, _ = pdata.encode_rows(tok, tmp_path, rows, "dpo", 128)
    assert not issues
    theirs = trainer.train_dataset
    assert [r["prompt_ids"] for r in ours] == theirs["prompt_ids"]
    assert [r["chosen_ids"] for r in ours] == theirs["chosen_ids"]
    assert [r["rejected_ids"] for r in ours] == theirs["rejected_ids"]
    with torch.no_grad():
        expected = float(trainer._compute_loss(trainer.model, trainer.data_collator(list(theirs)), False))
    got = _ember_loss(policy, ref, pdata.PairCollator(tok.pad_token_id, ploss.Options("dpo", 0.1, loss_type)), ours)
    assert got == pytest.approx(expected, abs=1e-5)
    assert abs(expected - math.log(2)) > 1e-3  # the policy and reference really differ


def test_orpo_loss_equals_trls(tmp_path):
    import torch
    from datasets import Dataset
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    policy, _, tok = _models(2)
    rows = _rows(6)
    # TRL's ORPO reads plain strings: the prompt as the chat template renders it, the answers as text.
    plain = [{"prompt": pdata.render(tok, r["prompt"], True), "chosen": r["chosen"][0]["content"],
              "rejected": r["rejected"][0]["content"]} for _, r in rows]
    args = ORPOConfig(output_dir=str(tmp_path), beta=0.1, max_length=128, report_to=[],
                      per_device_train_batch_size=6, use_cpu=True)
    trainer = ORPOTrainer(model=policy, args=args, train_dataset=Dataset.from_list(plain), processing_class=tok)
    ours, _, _ = pdata.encode_rows(tok, tmp_path, rows, "orpo", 128)
    theirs = trainer.train_dataset
    assert [r["prompt_ids"] + r["chosen_ids"] for r in ours] == theirs["chosen_input_ids"]
    assert [r["prompt_ids"] + r["rejected_ids"] for r in ours] == theirs["rejected_input_ids"]
    with torch.no_grad():
        expected, _ = trainer.get_batch_loss_metrics(trainer.model, trainer.data_collator(list(theirs)))
    got = _ember_loss(policy, None, pdata.PairCollator(tok.pad_token_id, ploss.Options("orpo", 0.1)), ours)
    assert got == pytest.approx(float(expected), abs=1e-5)


def test_kto_loss_equals_trls(tmp_path):
    import torch
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    policy, ref, tok = _models(3)
    rows = pdata.unpair(_rows(4))
    args = KTOConfig(output_dir=str(tmp_path), beta=0.1, desirable_weight=1.0, undesirable_weight=1.5,
                     max_length=128, report_to=[], per_device_train_batch_size=4, use_cpu=True,
                     precompute_ref_log_probs=False)
    trainer = KTOTrainer(model=policy, ref_model=ref, args=args, processing_class=tok,
                         train_dataset=Dataset.from_list([r for _, r in rows]))
    ours, _, _ = pdata.encode_rows(tok, tmp_path, rows, "kto", 128)
    pdata.add_kl_completions(ours, 4, 128)
    theirs = trainer.train_dataset
    assert [r["completion_ids"] for r in ours] == theirs["completion_ids"]
    assert [r["kl_completion_ids"] for r in ours] == theirs["KL_completion_ids"]
    options = ploss.Options("kto", 0.1, desirable_weight=1.0, undesirable_weight=1.5)
    for start in (0, 4):  # two batches, each with its own KL baseline
        with torch.no_grad():
            batch = trainer.data_collator([theirs[i] for i in range(start, start + 4)])
            expected = float(trainer._compute_loss(trainer.model, batch, False))
        got = _ember_loss(policy, ref, pdata.KtoCollator(tok.pad_token_id, options), ours[start:start + 4])
        assert got == pytest.approx(expected, abs=1e-5)
        assert trainer._metrics["eval"]["kl"][-1] > 0  # the KL baseline took part


# ---------------------------------------------------------------- a real run


@pytest.mark.slow
def test_dpo_fine_tune_through_the_engine_raises_validation_reward_accuracy(engine_proc):
    from tests.engine.test_finetune import events_of, wait_final

    spec = {"task": "causal_lm", "objective": "dpo", "method": {"kind": "full"}, "batch_size": 8,
            "max_steps": 20, "eval_every": 4, "checkpoint_every": 20, "optim": {"lr": 0.003},
            "data": {"max_length": 64}, "preference": {"beta": 0.1, "loss_type": "sigmoid"}}
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        info = events_of(c, job["id"], "run_info")[0]
        assert info["data"]["objective"] == "dpo" and info["n_train"] == 225
        train = events_of(c, job["id"], "train")
        assert [e["step"] for e in train] == list(range(1, 21))
        assert train[0]["loss"] == pytest.approx(math.log(2), abs=1e-4)  # policy == reference at the start
        for e in train:
            assert {"reward_chosen", "reward_rejected", "reward_margin", "reward_accuracy"} <= set(e)
        evals = [e["metrics"] for e in events_of(c, job["id"], "eval")]
        assert len(evals) == 5
        assert evals[-1]["reward_accuracy"] > evals[0]["reward_accuracy"]
        assert evals[-1]["reward_margin"] > evals[0]["reward_margin"] > 0
        assert evals[-1]["loss"] < evals[0]["loss"] < math.log(2)
