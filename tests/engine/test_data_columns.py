"""The columns of a user's data file, as the wizard offers them: names, what tells text from labels, a guess."""

from __future__ import annotations

import json

from engine.api.train_spec import TrainSpec
from engine.preflight.data import inspect_data
from engine.tasks.text_files import column_profile, guess_columns


def test_csv_and_jsonl_columns_and_the_guess(tmp_path):
    csv_file = tmp_path / "tickets.csv"
    csv_file.write_text("id;body;team\n1;the printer on floor two is jammed;hardware\n"
                        "2;I cannot log in since this morning;account\n3;my screen flickers;hardware\n"
                        "4;reset my password please;account\n", encoding="utf-8")
    profile = column_profile(str(csv_file))
    assert [c["name"] for c in profile] == ["id", "body", "team"]  # the delimiter sniffed from the header
    assert {c["name"]: c["distinct"] for c in profile} == {"id": 4, "body": 4, "team": 2}
    # The longest text; the fewest values, and not the id (a different value on every row).
    assert guess_columns(profile) == {"text_column": "body", "label_column": "team"}

    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("\n".join(json.dumps({"question": q, "topic": t, "meta": {"x": 1}}) for q, t in
                               [("where is my parcel today", "shipping"), ("refund for a broken mug", "billing"),
                                ("parcel arrived damaged", "shipping")]) + "\nnot json\n", encoding="utf-8")
    assert guess_columns(column_profile(str(jsonl))) == {"text_column": "question", "label_column": "topic"}
    assert column_profile(str(tmp_path / "missing.csv")) == [] and column_profile(str(tmp_path)) == []


def test_inspect_offers_the_columns_and_counts_the_training_split(tmp_path):
    data = tmp_path / "messages.csv"
    data.write_text("msg,category\n" + "".join(f"message number {i} about things,{'ab'[i % 2]}\n" for i in range(20)),
                    encoding="utf-8")
    spec = TrainSpec.model_validate({"task": "text_classification", "data": {"path": str(data)}})
    reply = inspect_data(spec)
    assert [c["name"] for c in reply["file_columns"]] == ["msg", "category"]
    assert reply["column_guess"] == {"text_column": "msg", "label_column": "category"}
    assert any("no column 'text'" in i["message"] for i in reply["issues"])

    spec = TrainSpec.model_validate({"task": "text_classification", "data": {
        "path": str(data), "text_column": "msg", "label_column": "category", "val_fraction": 0.2}})
    reply = inspect_data(spec)
    assert reply["issues"] == []
    assert (reply["n_train"], reply["n_val"]) == (16, 4)
    assert reply["class_counts"] == {"a": 8, "b": 8}  # the training split's, not all 20 rows
