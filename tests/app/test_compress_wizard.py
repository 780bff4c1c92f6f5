"""The Compress wizard on canned engine replies: source list, techniques, settings, review, run.

These are widget tests: a FakeEngineClient answers with records shaped like the
engine's (docs/compression.md, app/connection/engine_client.py) on the next turn of the
event loop, as the real client does. The real engine is exercised by the
end-to-end test written elsewhere.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from PySide6.QtCore import QObject, Qt, QTimer, Signal

from app.connection.engine_client import Subscription
from engine.api.protocol import INVALID_PARAMS, METHOD_NOT_FOUND, RpcError
from engine.api.specs import validate_spec
from engine.api.train_spec import TrainSpec


class FakeEngineClient(QObject):
    """A tiny stand-in for EngineClient in widget tests: canned replies, events published by hand.

    ``replies`` maps a method to a value, an RpcError, or a function of the params
    returning either. Replies arrive on the next turn of the event loop, never
    inside ``request``, like the real client's.
    """

    connected = Signal(dict)
    disconnected = Signal()
    event = Signal(str, int, dict)
    error = Signal(str)

    def __init__(self, replies: dict[str, Any]):
        super().__init__()
        self.replies = replies
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.subscriptions: list[Subscription] = []
        self.is_connected = True
        self.pending = 0
        self._seq = 0

    def request(self, method: str, params: dict[str, Any] | None = None,
                callback: Callable | None = None, error_callback: Callable | None = None) -> int:
        params = copy.deepcopy(params or {})
        self.requests.append((method, params))
        if method in self.replies:
            reply = self.replies[method]
            reply = reply(params) if callable(reply) else reply
            reply = reply if isinstance(reply, RpcError) else copy.deepcopy(reply)
        else:
            reply = RpcError(METHOD_NOT_FOUND, f"Unknown method {method!r}")
        self.pending += 1

        def deliver() -> None:
            self.pending -= 1
            if isinstance(reply, RpcError):
                if error_callback is not None:
                    error_callback(reply)
            elif callback is not None:
                callback(reply)

        QTimer.singleShot(0, self, deliver)
        return len(self.requests)

    def subscribe(self, topics: list[str], callback: Callable | None = None,
                  since: int | None = None) -> Subscription:
        sub = Subscription(list(topics), callback, since)
        self.subscriptions.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub in self.subscriptions:
            self.subscriptions.remove(sub)

    def publish(self, topic: str, data: dict[str, Any]) -> None:
        """An engine event, delivered to every matching subscription."""
        self._seq += 1
        for sub in list(self.subscriptions):
            if sub.matches(topic) and sub.callback is not None:
                sub.callback(topic, self._seq, copy.deepcopy(data))

    def sent(self, method: str) -> list[dict[str, Any]]:
        return [params for m, params in self.requests if m == method]


def fake_engine(replies: dict[str, Any]) -> SimpleNamespace:
    """What a page is built from: an object with ``client`` and the ``jobs`` state fed by it."""
    from app.state.job_list import JobsState

    client = FakeEngineClient(replies)
    return SimpleNamespace(client=client, jobs=JobsState(client, client))


def settle(qtbot, client: FakeEngineClient) -> None:
    qtbot.waitUntil(lambda: client.pending == 0, timeout=5000)


def finetune_record(run_id: str, name: str, spec: dict[str, Any], best: float, model: str) -> dict[str, Any]:
    """A finished train.finetune record as jobs.list returns it (full spec, summary)."""
    full = TrainSpec.model_validate(spec).model_dump(mode="json")
    now = time.time()
    return {"id": run_id, "kind": "train.finetune", "name": name, "state": "succeeded",
            "created_at": now - 600, "started_at": now - 590, "ended_at": now - 300, "pid": None,
            "exit_code": 0, "error": None, "run_dir": f"/tmp/ember/runs/{run_id}", "spec": full,
            "parent_id": None, "host": None,
            "summary": {"task": full["task"], "model": model, "method": full["method"]["kind"],
                        "strategy": "single", "nproc": 1,
                        "best": {"metric": "accuracy", "value": best, "step": 40},
                        "estimated_peak": None, "measured_peak": None}}


LORA = finetune_record("r20260101-lora", "tickets-lora-r8",
                       {"task": "text_classification", "method": {"kind": "lora", "lora_r": 8},
                        "max_steps": 40, "optim": {"lr": 0.003}, "data": {"max_length": 48}},
                       0.91, "minilm")
FULL_TEXT = finetune_record("r20260101-full", "tickets-full",
                            {"task": "text_classification", "method": {"kind": "full"},
                             "max_steps": 60, "optim": {"lr": 5e-5}}, 0.93, "minilm")
DIGITS = finetune_record("r20260101-digits", "digits-cnn-full",
                         {"task": "image_classification", "method": {"kind": "full"},
                          "max_steps": 200, "optim": {"lr": 0.002}}, 0.97, "digits-cnn")
RUNS = [LORA, FULL_TEXT, DIGITS]


def started_record(params: dict[str, Any]) -> dict[str, Any] | RpcError:
    """jobs.start: a queued record, or the engine's refusal of an invalid spec."""
    try:
        validate_spec(params["kind"], params["spec"])
    except ValueError as exc:
        return RpcError(INVALID_PARAMS, str(exc).splitlines()[0])
    started_record.count += 1
    source = params["spec"].get("source_run") or (params["spec"].get("distill") or {}).get("teacher_run")
    return {"id": f"r-job-{started_record.count}", "kind": params["kind"], "name": params["name"],
            "state": "queued", "spec": params["spec"], "parent_id": source, "error": None}


started_record.count = 0


@pytest.fixture
def page(qtbot):
    from app.pages.compress import CompressPage

    engine = fake_engine({"jobs.list": {"jobs": copy.deepcopy(RUNS)}, "jobs.start": started_record,
                          "jobs.cancel": lambda p: {"id": p["id"], "kind": "compress.quantize",
                                                    "state": "cancelled", "error": None}})
    widget = CompressPage(engine)
    qtbot.addWidget(widget)
    widget.resize(1100, 800)
    widget.show()
    settle(qtbot, engine.client)
    yield widget
    settle(qtbot, engine.client)


def tick(page, *keys: str) -> None:
    for key, check in page.technique_checks.items():
        check.setChecked(key in keys)


def test_source_list_shows_finished_finetunes_and_set_source_preselects(page, qtbot):
    client = page._client
    assert len(client.sent("jobs.list")) == 1  # the one list of the JobsState
    assert sorted(page.source_step.source_ids()) == sorted(r["id"] for r in RUNS)
    item = page.source_step._item(LORA["id"])
    assert [item.text(c) for c in range(5)] == ["tickets-lora-r8", "text classification", "minilm", "lora",
                                                "accuracy 0.91 @ step 40"]
    # Nothing chosen: Next stays disabled, every technique too.
    assert page.current_step() == 0 and not page.next_button.isEnabled()
    assert not any(c.isEnabled() for c in page.technique_checks.values())

    page.set_source(LORA["id"])
    assert page.source()["id"] == LORA["id"]
    assert page.current_step() == 1  # straight to the techniques
    assert not page.next_button.isEnabled()  # none ticked yet
    page.technique_checks["dynamic_int8"].setChecked(True)
    assert page.next_button.isEnabled()

    # A run that finishes later is offered without a reload.
    late = copy.deepcopy(FULL_TEXT)
    late.update(id="r20260102-late", name="tickets-late")
    client.publish("jobs", late)
    assert "r20260102-late" in page.source_step.source_ids()


def test_set_source_of_an_unfinished_run_says_why(page, qtbot):
    running = copy.deepcopy(LORA)
    running.update(id="r-running", state="running")
    page._client.replies["jobs.get"] = running
    page.set_source("r-running")
    settle(qtbot, page._client)
    assert page.source() is None and page.current_step() == 0
    assert "only a finished (succeeded) fine-tune can be compressed" in page.status_label.text()


def test_lora_merge_only_for_lora_runs_and_distillation_only_for_transformers(page):
    checks, reasons = page.technique_checks, page.techniques_step.reasons
    page.set_source(FULL_TEXT["id"])
    assert not checks["lora_merge"].isEnabled()
    assert "Only for LoRA fine-tunes: this run's method is full" in reasons["lora_merge"].text()
    assert reasons["lora_merge"].isVisible()
    assert checks["distill"].isEnabled() and not reasons["distill"].isVisible()
    assert all(checks[k].isEnabled() for k in ("dynamic_int8", "static_int8", "fp16", "qat", "prune"))

    page.set_source(LORA["id"])
    assert checks["lora_merge"].isEnabled() and not reasons["lora_merge"].isVisible()
    checks["lora_merge"].setChecked(True)
    checks["distill"].setChecked(True)

    # The digits CNN: no adapters and no transformer blocks; ticks that no longer apply go.
    page.source_step.select(DIGITS["id"])
    assert not checks["lora_merge"].isEnabled() and not checks["lora_merge"].isChecked()
    assert not checks["distill"].isEnabled() and not checks["distill"].isChecked()
    assert "Needs a transformer model" in reasons["distill"].text()
    assert not checks["qat"].isEnabled() and "Use Static int8 for image models" in reasons["qat"].text()
    assert all(checks[k].isEnabled() for k in ("dynamic_int8", "static_int8", "fp16", "prune"))
    assert page.specs() == []


def test_ticking_techniques_shows_only_their_settings(page):
    page.set_source(LORA["id"])
    settings = page.settings_step
    eval_fields = {"eval.samples", "eval.batch_size", "eval.repeats", "eval.threads"}

    tick(page, "dynamic_int8")
    assert set(settings.visible_fields()) == {"per_channel", "exclude_op_types"} | eval_fields
    tick(page, "fp16")  # no scales: per-channel is not asked
    assert set(settings.visible_fields()) == {"exclude_op_types"} | eval_fields
    tick(page, "static_int8")
    assert set(settings.visible_fields()) == {"per_channel", "exclude_op_types", "calibration.samples",
                                              "calibration.method", "int8_target"} | eval_fields
    tick(page, "qat")
    assert set(settings.visible_fields()) == {"qat.steps", "qat.lr", "calibration.samples",
                                              "calibration.method", "int8_target"} | eval_fields
    tick(page, "prune")
    assert set(settings.visible_fields()) == {"prune.target", "prune.ratio", "prune.iterative_steps",
                                              "prune.recovery_steps", "prune.vocabulary"} | eval_fields
    tick(page, "distill")  # a fine-tune: no compression evaluation settings
    assert set(settings.visible_fields()) == {"distill.student_layers", "distill.temperature",
                                              "distill.alpha", "distill.max_steps", "distill.lr"}
    tick(page, "lora_merge")
    assert set(settings.visible_fields()) == eval_fields


def test_invalid_values_show_an_error_under_the_field_and_block_next(page, qtbot):
    page.set_source(LORA["id"])
    tick(page, "prune", "qat", "dynamic_int8")
    qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
    assert page.current_step() == 2 and page.next_button.isEnabled()
    fields, messages = page.settings_step.fields, page.settings_step.field_messages

    fields["prune.ratio"].setValue(1.0)  # the spin box allows it; PruneSpec does not
    assert messages["prune.ratio"].isVisible()
    assert messages["prune.ratio"].text() == "Ratio to remove must be less than 1."
    assert "prune.ratio" in messages["prune.ratio"].toolTip()
    assert not page.next_button.isEnabled() and not page.run_button.isEnabled()
    assert "Structured pruning: Ratio to remove must be less than 1." in page.status_label.text()
    assert page.step_buttons[2].text().endswith("⚠")

    fields["qat.lr"].setText("fast")
    page.settings_step.emit_changed()
    assert "must be a number" in messages["qat.lr"].text()
    fields["eval.repeats"].setValue(1)  # shared by all three jobs: said once
    assert messages["eval.repeats"].text() == "Repeats must be at least 3."

    fields["prune.ratio"].setValue(0.5)
    fields["qat.lr"].setText("1e-4")
    page.settings_step.emit_changed()
    fields["eval.repeats"].setValue(5)
    assert not any(m.isVisible() for m in messages.values())
    assert page.next_button.isEnabled() and page.run_button.isEnabled()
    specs = {kind + spec.get("mode", ""): spec for kind, spec, _name in page.specs()}
    assert specs["compress.prune"]["ratio"] == 0.5 and specs["compress.qat"]["lr"] == 1e-4
    assert specs["compress.quantizedynamic"]["eval"]["repeats"] == 5


def test_review_yaml_is_exactly_what_start_sends(page, qtbot):
    page.set_source(LORA["id"])
    tick(page, "lora_merge", "dynamic_int8", "static_int8", "prune", "distill")
    page.settings_step.fields["calibration.method"].setCurrentIndex(1)  # entropy
    ops = page.settings_step.fields["exclude_op_types"]
    ops.item(0).setCheckState(Qt.CheckState.Checked)  # MatMul
    page.go_to(3)
    assert page.current_step() == 3

    specs = page.specs()
    docs = list(yaml.safe_load_all(page.review_view.toPlainText()))
    assert docs == [{"kind": kind, "name": name, "spec": spec} for kind, spec, name in specs]
    assert [d["kind"] for d in docs] == ["compress.lora_merge", "compress.quantize", "compress.quantize",
                                         "compress.prune", "train.finetune"]
    for doc in docs:
        validate_spec(doc["kind"], doc["spec"])  # the engine's own models accept every one
    static = docs[2]["spec"]
    assert static["mode"] == "static" and static["calibration"] == {"samples": 64, "method": "entropy"}
    assert static["exclude_op_types"] == ["MatMul"] and static["source_run"] == LORA["id"]
    distill = docs[4]["spec"]
    assert distill["method"] == {"kind": "full"} and distill["resume"] is True
    assert distill["distill"] == {"teacher_run": LORA["id"], "student_layers": 3, "temperature": 2.0,
                                  "alpha": 0.5}
    assert distill["max_steps"] == 200 and distill["data"] == {"max_length": 48}  # the teacher's data
    assert distill["optim"]["lr"] == 5e-5  # a full fine-tune's rate, not the LoRA teacher's 3e-3
    assert page.run_button.text() == "Start 5 jobs"

    # Start: one jobs.start per document, with exactly its kind, spec and name.
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    settle(qtbot, page._client)
    assert page._client.sent("jobs.start") == docs
    assert page.current_step() == 4
    assert [row.state for row in page.job_rows] == ["queued"] * 5
    assert all(row.job_id for row in page.job_rows)


def test_a_chain_preset_becomes_one_chain_job(page, qtbot):
    page.set_source(FULL_TEXT["id"])
    qtbot.mouseClick(page.techniques_step.preset_button, Qt.MouseButton.LeftButton)
    assert page.techniques_step.checked() == ["dynamic_int8", "distill"]
    assert page.techniques_step.chain()
    assert "Distillation → Dynamic int8" in page.techniques_step.chain_line.text()
    page.go_to(3)
    docs = list(yaml.safe_load_all(page.review_view.toPlainText()))
    assert len(docs) == 1 and docs[0]["kind"] == "compress.chain"
    spec = validate_spec("compress.chain", docs[0]["spec"])
    assert spec.source_run == FULL_TEXT["id"]
    assert [s.technique for s in spec.stages] == ["distill", "quantize"]
    assert spec.stages[0].settings["steps"] == 300 and spec.stages[1].settings["mode"] == "dynamic"
    assert page.run_button.text() == "Start 1 job"
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    settle(qtbot, page._client)
    assert page._client.sent("jobs.start") == docs

    # Two quantizations cannot end one chain: said on the techniques step, and Start is blocked.
    page.go_to(1)
    tick(page, "distill", "dynamic_int8", "static_int8")
    assert "only one of dynamic int8" in page.techniques_step.chain_line.text()
    assert any("only one of dynamic int8" in b for b in page.blockers())
    page.techniques_step.chain_check.setChecked(False)
    assert page.blockers() == [] and page.run_button.text() == "Start 3 jobs"


def test_deploy_on_comes_first_and_sets_the_int8_form_and_the_suggestions(page, qtbot):
    """Where the model will run decides static int8's and QAT's form, what is suggested, and what Compare opens on."""
    page.set_source(FULL_TEXT["id"])
    step = page.techniques_step
    assert step.deploy() == "cpu" and page.settings_step.values()["int8_target"] == "cpu"
    assert "Not for it: fp16" in step.deploy_line.text() and "Dynamic int8" in step.deploy_line.text()
    qtbot.mouseClick(step.suggest_button, Qt.MouseButton.LeftButton)
    assert step.checked() == ["dynamic_int8", "static_int8", "qat", "prune", "distill"]  # no LoRA to merge
    page.go_to(3)
    docs = list(yaml.safe_load_all(page.review_view.toPlainText()))
    assert [d["spec"].get("target") for d in docs if d["kind"] in ("compress.quantize", "compress.qat")] == \
        [None, "cpu", "cpu"]  # dynamic int8 has one form

    page.go_to(1)
    step.set_deploy("jetson")
    assert page.settings_step.values()["int8_target"] == "tensorrt"
    assert "Dynamic int8 (ONNX Runtime's CPU kernels" in step.deploy_line.text()
    qtbot.mouseClick(step.suggest_button, Qt.MouseButton.LeftButton)
    assert step.checked() == ["static_int8", "fp16", "qat", "prune", "distill"]
    docs = list(yaml.safe_load_all(page.review_view.toPlainText()))
    assert {d["spec"]["target"] for d in docs if d["kind"] in ("compress.quantize", "compress.qat")
            and d["spec"]["mode" if d["kind"] == "compress.quantize" else "steps"] != "fp16"} == {"tensorrt"}
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    settle(qtbot, page._client)
    opened: list[dict] = []
    page.nav.requested.connect(lambda key, args: opened.append(args))
    qtbot.mouseClick(page.run_step.compare_button, Qt.MouseButton.LeftButton)
    assert opened == [{"variants_of": FULL_TEXT["id"], "deploy": "jetson"}]


def test_run_rows_follow_state_progress_and_cancel(page, qtbot):
    client = page._client
    page.set_source(LORA["id"])
    tick(page, "dynamic_int8", "prune")
    page.settings_step.fields["prune.recovery_steps"].setValue(10)
    page.go_to(3)
    client.replies["jobs.start"] = lambda p: (RpcError(INVALID_PARAMS, "Invalid spec for compress.prune",
                                                       {"hint": "Fix the fields listed"})
                                              if p["kind"] == "compress.prune" else started_record(p))
    page.start()
    settle(qtbot, client)
    quant, prune = page.job_rows
    assert quant.state == "queued" and quant.cancel_button.isEnabled()
    assert prune.state == "not started" and not prune.cancel_button.isEnabled()
    assert "Invalid spec for compress.prune (Fix the fields listed)" in prune.detail_label.text()

    # The jobs topic moves the state; the job's own events move the bar.
    record = {"id": quant.job_id, "kind": "compress.quantize", "name": quant.name, "state": "running",
              "parent_id": LORA["id"], "error": None}
    client.publish("jobs", record)
    assert quant.state_label.text() == "running"
    client.publish(f"run/{quant.job_id}/progress", {"stage": "quantize", "fraction": 0.4,
                                                    "message": "quantizing: int8 dynamic"})
    assert quant.progress.value() == 400 and quant.detail_label.text() == "quantizing: int8 dynamic"
    client.publish(f"run/{quant.job_id}/progress", {"stage": "evaluate", "fraction": 0.8,
                                                    "message": "evaluating beside the parent"})
    assert quant.progress.value() == 800 and quant.detail_label.text() == "evaluating beside the parent"

    qtbot.mouseClick(quant.cancel_button, Qt.MouseButton.LeftButton)
    settle(qtbot, client)
    assert client.sent("jobs.cancel") == [{"id": quant.job_id}]
    assert quant.state == "cancelled" and not quant.cancel_button.isEnabled()
    assert not [s for s in client.subscriptions if s.topics == [f"run/{quant.job_id}/*"]]
    assert page.run_step.summary.text() == "1 cancelled, 1 not started"

    # Compare variants asks the window to open the Variants view of the source run.
    opened: list[str] = []
    page.nav.requested.connect(lambda key, args: opened.append(args["variants_of"]))  # Compare's Variants
    qtbot.mouseClick(page.run_step.compare_button, Qt.MouseButton.LeftButton)
    assert opened == [LORA["id"]]


def test_a_failed_job_shows_its_error_and_a_finished_one_a_full_bar(page, qtbot):
    client = page._client
    page.set_source(FULL_TEXT["id"])
    tick(page, "fp16", "qat")
    page.go_to(3)
    page.start()
    settle(qtbot, client)
    fp16, qat = page.job_rows
    client.publish("jobs", {"id": fp16.job_id, "kind": "compress.quantize", "state": "succeeded", "error": None})
    client.publish("jobs", {"id": qat.job_id, "kind": "compress.qat", "state": "failed",
                            "error": {"message": "QAT diverged: loss is nan", "hint": "Lower lr"}})
    assert fp16.progress.value() == 1000 and fp16.state_label.text() == "succeeded"
    assert qat.detail_label.text() == "QAT diverged: loss is nan (Lower lr)"
    assert not qat.cancel_button.isEnabled()


def test_runs_page_offers_compress_for_a_finished_finetune(qtbot):
    from app.pages.runs import RunsPage

    running = copy.deepcopy(FULL_TEXT)
    running.update(id="r-running", name="still-training", state="running")
    engine = fake_engine({"jobs.list": {"jobs": copy.deepcopy(RUNS) + [running]},
                          "jobs.get": lambda p: next(r for r in RUNS + [running] if r["id"] == p["id"])})
    runs = RunsPage(engine)
    qtbot.addWidget(runs)
    settle(qtbot, engine.client)
    opened: list[str] = []
    runs.nav.requested.connect(lambda key, args: opened.append(args["source"]))  # to Compress
    assert runs.select_run("r-running") and not runs.compress_button.isEnabled()
    assert runs.select_run(LORA["id"]) and runs.compress_button.isEnabled()
    qtbot.mouseClick(runs.compress_button, Qt.MouseButton.LeftButton)
    assert opened == [LORA["id"]]
    settle(qtbot, engine.client)
