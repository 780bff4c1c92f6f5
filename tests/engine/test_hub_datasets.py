"""Datasets from the Hugging Face Hub (data.hub), against the Hub stand-in on 127.0.0.1 (tests/hub_standin.py).

A dataset repo downloads into the standard cache with the models' downloader; data.inspect then shows
its splits and columns (the column picker's facts) without the network; a causal LM maps renamed
columns; a short text-classification fine-tune downloads its dataset first, then trains; offline and
not cached, the message says how to fix it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES, MODEL_DOWNLOAD
from engine.api.train_spec import TrainSpec
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process, wait_for
from tests.hub_standin import HubStandin, point_huggingface_hub_at

REVIEWS = "acme/tiny-reviews"  # Parquet, train and validation splits, columns sentence and label
QA = "acme/tiny-qa"  # one CSV named by the dataset card, columns question and answer

GOOD = ("I loved this film", "a wonderful story", "great acting and a warm ending", "the best film this year",
        "funny, kind and clever", "a joy from start to end", "beautifully shot", "I would watch it again")
BAD = ("I hated this film", "a dull story", "wooden acting and a cold ending", "the worst film this year",
       "boring, mean and silly", "a chore from start to end", "badly shot", "I want my time back")


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def review_rows(n: int, offset: int = 0) -> list[dict]:
    rows = []
    for i in range(offset, offset + n):
        words, label = (GOOD, "positive") if i % 2 == 0 else (BAD, "negative")
        rows.append({"sentence": f"{words[i // 2 % len(words)]} ({i})", "label": label})
    return rows


def qa_csv() -> bytes:
    lines = ["question,answer"] + [f"What is {i} plus {i}?,{2 * i}" for i in range(12)]
    return ("\n".join(lines) + "\n").encode()


QA_CARD = b"""---
license: mit
configs:
- config_name: default
  data_files:
  - split: train
    path: qa.csv
---
# Tiny QA
"""


@pytest.fixture
def hub(tmp_path, monkeypatch):
    standin = HubStandin()
    standin.add_dataset(REVIEWS, {"README.md": b"# Tiny reviews\n",
                                  "data/train-00000-of-00001.parquet": _parquet(review_rows(40)),
                                  "data/validation-00000-of-00001.parquet": _parquet(review_rows(10, 40))},
                        downloads=99)
    standin.add_dataset(QA, {"README.md": QA_CARD, "qa.csv": qa_csv(), "notes.txt": b"not data\n"})
    standin.start()
    point_huggingface_hub_at(standin, tmp_path / "hf-home", monkeypatch)
    monkeypatch.setenv("EMBER_HOME", str(tmp_path / "ember"))
    yield standin
    standin.stop()


@pytest.fixture
def engine(hub, ember_home):
    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    yield eng
    eng.stop()
    kill_job_groups(ember_home.home)


def offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def wait_final(c, job_id, timeout=240):
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j, timeout=timeout,
                    interval=0.2, what=f"job {job_id} to end")


def events(c, job_id, kind):
    return [e["data"] for e in c.call("events.query", topics=[f"run/{job_id}/{kind}"], limit=10_000)["events"]]


# ---------------------------------------------------------------- download and the column picker's facts


def test_a_dataset_downloads_into_the_cache_and_data_inspect_offers_its_splits_and_columns(hub, monkeypatch):
    from engine.preflight.data import inspect_data
    from engine.tasks import hub_models

    seen: list[dict] = []
    folder = hub_models.download(REVIEWS, None, report=seen.append, repo_type="dataset")
    assert folder.parent.parent.name == "datasets--acme--tiny-reviews"  # the standard layout, as `hf download`
    assert folder.parent.parent.parent == Path(os.environ["HF_HOME"]) / "hub"
    for name, data in hub.datasets[REVIEWS].files.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert seen[-1]["bytes_done"] == seen[-1]["bytes_total"] == sum(map(len, hub.datasets[REVIEWS].files.values()))
    assert {r["path"].split("/")[1] for r in hub.requests if r["path"] != "/api/agent-harnesses"} == {"api",
                                                                                                     "datasets"}

    offline(monkeypatch)  # from now on everything comes from the cache
    asked = len(hub.requests)
    reply = inspect_data(TrainSpec(data={"hub": REVIEWS}))
    facts = reply["hub"]
    assert facts["cached"] and facts["commit"] == hub.datasets[REVIEWS].sha
    assert facts["splits"] == {"train": ["data/train-00000-of-00001.parquet"],
                               "validation": ["data/validation-00000-of-00001.parquet"]}
    assert (facts["split"], facts["val_split"], facts["columns"]) == ("train", "validation", ["sentence", "label"])
    # The column picker: the file's columns with the text and label guessed; the default names are wrong.
    assert [c["name"] for c in reply["file_columns"]] == ["sentence", "label"]
    assert reply["column_guess"] == {"text_column": "sentence", "label_column": "label"}
    assert any("no field 'text'" in i["message"] and "data.text_column" in i["hint"] for i in reply["issues"])

    reply = inspect_data(TrainSpec(data={"hub": REVIEWS, "text_column": "sentence"}))
    assert reply["issues"] == []
    assert (reply["n_train"], reply["n_val"]) == (40, 10)  # the dataset's own validation split
    assert reply["class_counts"] == {"negative": 20, "positive": 20}
    assert reply["rows"][0]["sentence"] == "I loved this film (0)"
    assert len(hub.requests) == asked  # nothing was asked of the network

    # The training split named as a file, and a split that is not there.
    reply = inspect_data(TrainSpec(data={"hub": REVIEWS, "text_column": "sentence",
                                         "split": "data/validation-00000-of-00001.parquet", "val_split": "train"}))
    assert (reply["n_train"], reply["n_val"]) == (10, 40)
    reply = inspect_data(TrainSpec(data={"hub": REVIEWS, "text_column": "sentence", "split": "test"}))
    bad = [i for i in reply["issues"] if i["field"] == "data.split"]
    assert bad and "no split or file 'test' (splits: train, validation)" in bad[0]["message"]


def test_a_causal_lm_reads_renamed_columns_from_the_dataset_card(hub, monkeypatch):
    from engine.preflight.data import inspect_data
    from engine.tasks import causal_lm, hub_data, hub_models

    folder = hub_models.download(QA, None, repo_type="dataset")
    assert hub_data.splits_of(folder) == {"train": ["qa.csv"]}  # the card's configs, not the .txt beside it
    offline(monkeypatch)
    spec = TrainSpec(task="causal_lm", model={"builtin": "tiny-llama"}, data={"hub": QA})
    reply = inspect_data(spec)
    missing = [i for i in reply["issues"] if i["field"] == "data.columns"]
    assert missing and "has no prompt and response columns" in missing[0]["message"]
    assert "{prompt: question, response: answer}" in missing[0]["hint"]  # the fix, with the likely columns
    assert reply["hub"]["columns"] == ["question", "answer"]

    spec = TrainSpec(task="causal_lm", model={"builtin": "tiny-llama"},
                     data={"hub": QA, "columns": {"prompt": "question", "response": "answer"}, "max_length": 64})
    reply = inspect_data(spec)
    assert reply["issues"] == [] and reply["hub"]["val_split"] is None
    assert (reply["n_train"], reply["n_val"]) == (10, 2)  # no validation split: val_fraction of the rows
    assert reply["rows"][1] == {"line": "2", "prompt": "What is 1 plus 1?", "response": "2"}
    example = reply["rendered_example"]
    assert [example["text"][a:b] for a, b in example["learned"]] == ["0</s>"]
    assert causal_lm.validate(spec) == []


def test_spec_takes_a_hub_dataset_for_text_tasks_only():
    ok = TrainSpec(task="causal_lm", data={"hub": QA, "revision": "main", "columns": {"messages": "chat"}})
    assert ok.data_name() == QA
    for data, task, words in (({"hub": QA, "path": "x.csv"}, "text_classification", "set only one"),
                              ({"hub": QA}, "image_classification", "data.hub applies to"),
                              ({"split": "test"}, "text_classification", "apply to data.hub"),
                              ({"hub": QA, "columns": {"prompt": "q"}}, "text_classification",
                               "data.columns applies to causal_lm")):
        with pytest.raises(ValueError, match=words):
            TrainSpec(task=task, data=data)
    with pytest.raises(ValueError, match="data.hub takes prompt/response"):
        TrainSpec(task="causal_lm", objective="dpo", data={"hub": QA})


# ---------------------------------------------------------------- offline


def test_offline_and_not_cached_says_how_to_fix_it(hub, monkeypatch):
    from engine.preflight.data import inspect_data
    from engine.tasks import hub_models
    from engine.training.context import JobFailed

    offline(monkeypatch)
    reply = inspect_data(TrainSpec(data={"hub": REVIEWS, "text_column": "sentence"}))
    assert reply["hub"]["cached"] is False and reply["rows"] == []
    [issue] = reply["issues"]
    assert issue["field"] == "data.hub"
    assert "not in the Hugging Face cache" in issue["message"] and "HF_HUB_OFFLINE" in issue["message"]
    assert "set data.path" in issue["hint"] and "HF_HUB_OFFLINE=1" in issue["hint"]
    with pytest.raises(JobFailed, match="not in the Hugging Face cache"):  # what a fine-tune says as it starts
        hub_models.ensure(REVIEWS, None, repo_type="dataset")
    assert hub.requests == []

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub.stop()  # the link is down
    reply = inspect_data(TrainSpec(data={"hub": REVIEWS}))
    assert "cannot be reached" in reply["issues"][0]["message"]
    reply = inspect_data(TrainSpec(task="causal_lm", data={"hub": "acme/not-a-dataset"}))
    assert reply["issues"][0]["field"] == "data.hub"


# ---------------------------------------------------------------- through the engine


def test_download_job_and_a_fine_tune_that_downloads_its_dataset_first(engine, hub):
    spec = {"task": "text_classification", "data": {"hub": REVIEWS, "text_column": "sentence", "max_length": 32},
            "method": {"kind": "lora"}, "batch_size": 8, "max_steps": 2, "eval_every": 2, "checkpoint_every": 2}
    with engine.client() as c:
        # The model.download job takes a dataset (the Data step's Download button).
        job = c.call("jobs.start", kind=MODEL_DOWNLOAD, spec={"repo_id": QA, "repo_type": "dataset"})
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-20:]
        assert done["result"]["repo_type"] == "dataset" and Path(done["result"]["path"], "qa.csv").is_file()
        assert events(c, job["id"], "progress")[-1]["fraction"] == 1.0
        assert [m["repo_id"] for m in c.call("models.list")["models"]] == []  # the models list stays models

        assert c.call("jobs.check", kind="train.finetune", spec=spec)["issues"] == []  # downloadable: no issue
        job = c.call("jobs.start", kind="train.finetune", spec=spec)
        done = wait_final(c, job["id"])
        assert done["state"] == "succeeded", c.call("jobs.logs", id=job["id"])["lines"][-30:]
        progress = [p for p in events(c, job["id"], "progress") if p.get("stage") == "download"]
        assert progress and progress[-1]["bytes_done"] == progress[-1]["bytes_total"] > 0
        [got] = events(c, job["id"], "hub_data")
        assert (got["repo_id"], got["commit"]) == (REVIEWS, hub.datasets[REVIEWS].sha)
        assert len(events(c, job["id"], "train")) == 2
        assert "accuracy" in events(c, job["id"], "eval")[-1]["metrics"]
    meta = json.loads((engine.paths.run_dir(job["id"]) / "model" / "ember_model.json").read_text())
    assert (meta["data_info"]["n_train"], meta["data_info"]["n_val"]) == (40, 10)
    assert meta["data_info"]["label_names"] == ["negative", "positive"]
