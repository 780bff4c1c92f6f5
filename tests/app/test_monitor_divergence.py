"""The Monitor's banner for a run that diverged: its message and hint, kept when the run's closing error
(the same words) and its failed state arrive, never covered by a later warning."""

from __future__ import annotations

MESSAGE = ("Training diverged at step 12: the loss climbed to 4,667 (median of the last 5 steps), 667x its "
           "start of 7")
HINT = ("Lower optim.lr (now 0.05; try 0.005); keep gradient clipping on (optim.grad_clip, now 1; 1.0 or lower). "
        "No final model was saved; the last checkpoint (step-00000010) is kept, written before the divergence "
        "was detected.")


def test_a_diverged_event_puts_its_message_and_hint_in_the_banner(qtbot):
    from app.pages.monitor.page import MonitorPage
    from tests.app.test_compress_wizard import fake_engine, finetune_record, settle

    record = {**finetune_record("r-climb", "climb", {"task": "text_classification"}, 0.5, "minilm"),
              "state": "running", "ended_at": None}
    engine = fake_engine({"jobs.list": {"jobs": [record]}, "jobs.get": record, "jobs.logs": {"lines": []}})
    page = MonitorPage(engine)
    qtbot.addWidget(page)
    page.show()
    settle(qtbot, engine.client)
    assert page.job_id == "r-climb" and not page.banner.isVisible()

    publish = engine.client.publish
    publish("run/r-climb/train", {"t": 1.0, "step": 12, "loss": 4667.0, "progress": 0.1, "eta_s": 60.0})
    publish("run/r-climb/diverged", {"t": 2.0, "step": 12, "loss": 4667.0, "start_loss": 7.0,
                                     "message": MESSAGE, "hint": HINT, "checkpoint": None})
    qtbot.waitUntil(page.banner.isVisible, timeout=5000)
    assert page.banner.kind == "diverged"
    assert page.banner.property("state") == "error"  # red, as a failure
    assert page.banner.message.text() == f"Error: {MESSAGE}"
    assert page.banner.hint.text() == HINT and page.banner.hint.isVisible()

    # The run then ends: the error event with the same words, and a warning, change nothing.
    publish("run/r-climb/error", {"t": 2.1, "message": MESSAGE, "hint": HINT, "reason": "diverged"})
    publish("run/r-climb/warning", {"t": 2.2, "message": "Skipped step 13", "hint": ""})
    publish("jobs", {**record, "state": "failed", "ended_at": 3.0,
                     "error": {"message": MESSAGE, "hint": HINT}})
    qtbot.waitUntil(lambda: page.state_label.text() == "failed", timeout=5000)
    assert page.banner.kind == "diverged" and page.banner.message.text() == f"Error: {MESSAGE}"
    assert page.banner.hint.text() == HINT

    page.banner.dismiss()  # the user closes it
    assert not page.banner.isVisible()
    publish("run/r-climb/warning", {"t": 3.0, "message": "Disk nearly full", "hint": "Free some space."})
    assert page.banner.kind == "warning" and page.banner.message.text() == "Warning: Disk nearly full"
