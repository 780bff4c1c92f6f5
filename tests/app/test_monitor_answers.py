"""The Monitor's generated answers: the scores charted with the other evaluation metrics, and the table of
the latest evaluation's samples (live, replaced at each evaluation, and replayed when a finished run is opened)."""

from __future__ import annotations

import time

from tests.app.test_compress_wizard import fake_engine, finetune_record, settle

SCORES = ("exact_match", "token_f1", "rouge_l", "bleu", "chrf")


def lm_record(run_id: str, state: str) -> dict:
    record = finetune_record(run_id, run_id, {"task": "causal_lm"}, 0.0, "tiny-llama")
    return {**record, "state": state, "ended_at": None if state == "running" else record["ended_at"]}


def eval_event(step: int, answers: list[str], seconds: float = 0.25) -> dict:
    samples = [{"prompt": f"Question {i}?", "reference": f"Answer {i}.", "generated": text}
               for i, text in enumerate(answers)]
    scores = dict(zip(SCORES, (0.5, 0.6, 0.7, 0.1, 0.4), strict=True))
    return {"t": time.time(), "step": step, "metrics": {"loss": 2.0, "perplexity": 7.4, **scores},
            "samples": samples, "generation_s": seconds}


def test_samples_table_follows_each_evaluation_and_each_run(qtbot):
    from app.pages.monitor.page import MonitorPage

    live, finished = lm_record("r-live", "running"), lm_record("r-done", "succeeded")
    engine = fake_engine({"jobs.list": {"jobs": [live, finished]},
                          "jobs.get": lambda p: live if p["id"] == "r-live" else finished,
                          "jobs.logs": {"lines": []}})
    page = MonitorPage(engine)
    qtbot.addWidget(page)
    page.resize(1100, 900)
    page.show()
    settle(qtbot, engine.client)
    assert page.job_id == "r-live"  # the running one first
    samples = page.samples
    assert not samples.isVisible() and samples.table.rowCount() == 0  # nothing before an evaluation

    publish = engine.client.publish
    publish("run/r-live/train", {"t": time.time(), "step": 1, "loss": 3.0, "progress": 0.1})
    publish("run/r-live/eval", {"t": time.time(), "step": 1, "metrics": {"loss": 2.9}})  # no samples: no table
    assert not samples.isVisible()
    publish("run/r-live/eval", eval_event(10, ["Answer 0.", "", "Something else"]))
    assert samples.isVisible()
    assert samples.table.rowCount() == 3
    assert [samples.cell(0, c) for c in range(3)] == ["Question 0?", "Answer 0.", "Answer 0."]
    assert samples.cell(1, 2) == "(nothing)" and samples.table.item(1, 2).toolTip() == ""
    assert samples.cell(2, 2) == "Something else"
    assert samples.caption.text() == "Latest evaluation at step 10, generated in 0.2 s"
    # Charted with the other evaluation metrics, and written in the log's evaluation line.
    for name in SCORES:
        assert page.charts.eval_chart.count(name) == 1
    qtbot.waitUntil(lambda: "evaluation at step 10" in page.log_pane.text(), timeout=5000)
    assert "exact_match 0.5 · token_f1 0.6 · rouge_l 0.7 · bleu 0.1 · chrf 0.4" in page.log_pane.text()

    publish("run/r-live/eval", eval_event(20, ["New answer."], seconds=1.5))
    assert samples.table.rowCount() == 1 and samples.cell(0, 2) == "New answer."  # the latest replaces it
    assert samples.caption.text() == "Latest evaluation at step 20, generated in 1.5 s"
    assert page.charts.eval_chart.count("token_f1") == 2

    # A finished run: its history replays from the start and the table ends on its last evaluation.
    page.show_run("r-done")
    settle(qtbot, engine.client)
    assert not samples.isVisible() and samples.table.rowCount() == 0  # the other run's answers are gone
    publish("run/r-live/eval", eval_event(30, ["late, from the run shown before"]))
    assert samples.table.rowCount() == 0
    for step, answers in ((5, ["first"]), (10, ["second", "again"])):
        publish("run/r-done/eval", eval_event(step, answers))
    assert samples.isVisible() and samples.table.rowCount() == 2
    assert [samples.cell(r, 2) for r in range(2)] == ["second", "again"]
    assert samples.step == 10
    assert page.charts.eval_chart.count("exact_match") == 2

    # With the table showing, the page still fits what a 1024 x 700 window gives it, without sideways scrolling.
    from tests.app.test_layout import show, sideways_scrolling

    page.resize(860, 640)
    show(page)
    assert not sideways_scrolling(page)
    hint = page.minimumSizeHint()
    assert hint.width() <= 860 and hint.height() <= 640


def test_a_long_answer_is_shown_in_full_on_hover_and_odd_samples_are_skipped(qtbot):
    from app.pages.monitor.answer_samples import AnswerSamples

    table = AnswerSamples()
    qtbot.addWidget(table)
    long = "word " * 80
    table.add_event("eval", {"step": 3, "samples": [{"prompt": "P", "reference": "R", "generated": long},
                                                    "not a sample", {"prompt": 7}]})
    assert table.table.rowCount() == 2
    assert table.table.item(0, 2).toolTip() == long
    assert [table.cell(1, c) for c in range(3)] == ["", "", "(nothing)"]  # wrong types show as empty
    assert table.caption.text() == "Latest evaluation at step 3"
    table.add_event("checkpoint", {"step": 3, "samples": []})  # only eval events count
    assert table.table.rowCount() == 2
    table.add_event("eval", {"step": 4, "samples": []})
    assert table.table.rowCount() == 0 and table.isHidden()
