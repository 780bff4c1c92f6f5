"""data.chat_template: a chosen template is what training learns from, what the evaluation's answers are
prompted with, what the Playground renders for the tuned run, and what the wizard's preview shows."""

from __future__ import annotations

import json

import pytest
import yaml

from engine.api.train_spec import TrainSpec
from engine.tasks import causal_lm as lm
from engine.tasks import chat_templates, lm_generate
from engine.training import dist

torch = pytest.importorskip("torch")

ROW = [{"role": "user", "content": "Capital of Spain?"}, {"role": "assistant", "content": "Madrid."}]


class Recorder:
    stop_requested = False

    def __init__(self):
        self.events: list[dict] = []

    def emit(self, kind, **data):
        self.events.append({"kind": kind, **data})

    def log(self, message):
        pass


def learned_text(tokenizer, enc) -> str:
    return tokenizer.decode([t for t in enc["labels"] if t != lm.IGNORE])


@pytest.mark.parametrize("name, prompt_start, learned", [
    ("chatml", "<|im_start|>user\nCapital of Spain?<|im_end|>\n<|im_start|>assistant\n", "Madrid.<|im_end|>\n"),
    ("llama3", "<s><|start_header_id|>user<|end_header_id|>\n\nCapital of Spain?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n", "Madrid.<|eot_id|>"),
    ("plain", "<s>### User:\nCapital of Spain?\n\n### Assistant:\n", "Madrid.</s>"),
])
def test_a_chosen_template_renders_the_row_and_only_the_answer_is_learned(tmp_path, name, prompt_start, learned):
    folder = lm.make_tiny_model_folder(tmp_path / "m", chat_template=False)  # a model without a template
    tok = lm.load_tokenizer(folder, name)
    assert tok.model_has_chat_template is False
    text, spans = lm.render(tok, ROW)
    assert text.startswith(prompt_start) and [text[a:b] for a, b in spans] == [learned]
    enc = lm.encode(tok, ROW, 256)
    assert learned_text(tok, enc).replace(" ", "") == learned.replace(" ", "")
    # The evaluation prompts with the same text, up to where the answer starts.
    assert lm_generate.render_prompt(tok, ROW[:1]) == prompt_start


def test_auto_is_the_models_own_template_or_plain(tmp_path):
    own = lm.load_tokenizer(lm.make_tiny_model_folder(tmp_path / "own", chat_template=True), "auto")
    bare = lm.load_tokenizer(lm.make_tiny_model_folder(tmp_path / "bare", chat_template=False), "auto")
    assert own.model_has_chat_template and not bare.model_has_chat_template
    assert not chat_templates.has_template(bare)  # the fallback encoding, as before the choice existed
    # The fallback encoding and the plain template give the same text: auto without a template is plain.
    assert lm.render(bare, ROW) == lm.render(lm.load_tokenizer(tmp_path / "bare", "plain"), ROW)
    assert chat_templates.used_name(True, "auto") == "model" and chat_templates.used_name(False, "auto") == "plain"


def test_the_spec_takes_the_choice_for_causal_lm_only():
    assert TrainSpec(task="causal_lm", data={"chat_template": "llama3"}).data.chat_template == "llama3"
    assert TrainSpec().data.chat_template == "auto"
    with pytest.raises(ValueError, match="data.chat_template applies to causal_lm"):
        TrainSpec(task="text_classification", data={"chat_template": "chatml"})
    with pytest.raises(ValueError):
        TrainSpec(task="causal_lm", data={"chat_template": "vicuna"})


def test_a_run_trained_with_llama3_keeps_it_for_evaluation_and_the_playground(tmp_path):
    from engine.api.playground import GenerateSettings
    from engine.evaluate.generation import score_pairs
    from engine.inference.models import open_model
    from engine.trainer.loop import Trainer

    doc = {"task": "causal_lm", "model": {"builtin": "tiny-llama"}, "method": {"kind": "full"},
           "data": {"builtin": "tiny-instructions", "chat_template": "llama3", "max_length": 256},
           "batch_size": 4, "max_steps": 2, "eval_every": 2, "device": "cpu",
           "generate_eval": {"prompts": 2, "max_new_tokens": 4}}
    spec = TrainSpec.model_validate(doc)
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.yaml").write_text(yaml.safe_dump({"kind": "train.finetune", "spec": doc}))
    rec = Recorder()
    trainer = Trainer(spec, dist.World(0, 0, 1, "cpu", "test"), rec, run, checkpoints=False, answer_scorer=score_pairs)
    with torch.random.fork_rng(devices=[]):
        assert trainer.run() == "succeeded"
    assert trainer.data.info["chat_template_name"] == "llama3" and trainer.data.info["chat_template"] is True
    tok = lm.load_tokenizer(lm.ensure_tiny_llama(), "llama3")
    assert tok.decode(trainer.data.train[0]["input_ids"]).startswith("<s><|start_header_id|>")
    meta = json.loads((run / "model" / "ember_model.json").read_text())
    assert meta["data_info"]["chat_template_name"] == "llama3"
    # The evaluation's prompts are rendered with llama3 too.
    answers = lm_generate.AnswerEval(spec, trainer.data, dist.World(0, 0, 1, "cpu", "test"), score_pairs, rec)
    prompt_text = answers.tokenizer.decode(answers.rows[0]["ids"])
    assert prompt_text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert any(e["kind"] == "eval" and e.get("samples") for e in rec.events)
    # The Playground: "model" (the default) means the template the run trained with.
    kind, chat, info = open_model({"run_dir": str(run)})
    assert kind == "chat" and info["chat_template"] == "llama3"
    ids, _ = chat.prompt_ids([{"role": "user", "content": "Hi"}], GenerateSettings())
    assert chat.tokenizer.decode(ids) == ("<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                                          "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_data_inspect_shows_whether_the_model_has_a_template_and_a_rendered_row(tmp_path):
    from engine.preflight.data import inspect_data

    bare = lm.make_tiny_model_folder(tmp_path / "bare", chat_template=False)
    reply = inspect_data(TrainSpec(task="causal_lm", model={"path": str(bare)}, data={"builtin": "tiny-instructions"}))
    assert (reply["model_chat_template"], reply["chat_template"], reply["chat_template_used"]) == (False, "auto",
                                                                                                   "plain")
    example = reply["rendered_example"]
    first = lm.read_rows(lm.DATA_DIR / "train.jsonl")[0][0]
    assert example["line"] == first[0]
    assert example["text"].startswith("<s>### User:\n" + first[1][0]["content"])
    assert [example["text"][a:b] for a, b in example["learned"]] == [first[1][-1]["content"] + "</s>"]

    reply = inspect_data(TrainSpec(task="causal_lm", model={"path": str(bare)},
                                   data={"builtin": "tiny-instructions", "chat_template": "chatml"}))
    assert reply["chat_template_used"] == "chatml" and reply["rendered_example"]["text"].startswith("<|im_start|>user")
    # A Hub model that is not downloaded yet: no example, and nothing is fetched for a preview.
    reply = inspect_data(TrainSpec(task="causal_lm", model={"hub": "acme/not-here"},
                                   data={"builtin": "tiny-instructions"}))
    assert reply["model_chat_template"] is None and reply["rendered_example"] is None and reply["rows"]


@pytest.mark.parametrize("own", [True, False])
def test_the_previews_template_renders_what_the_tokenizer_renders(tmp_path, own):
    from engine.tasks.template_preview import FolderTemplate

    folder = lm.make_tiny_model_folder(tmp_path / "m", chat_template=own)
    rows = [ROW, [{"role": "system", "content": "Be brief."}, *ROW, {"role": "user", "content": "And France?"},
                  {"role": "assistant", "content": "Paris."}]]
    for name in chat_templates.CHOICES:
        quick, real = FolderTemplate(folder, name), lm.load_tokenizer(folder, name)
        assert quick.model_has_chat_template is real.model_has_chat_template is own
        for messages in rows:
            assert lm.render(quick, messages) == lm.render(real, messages)
