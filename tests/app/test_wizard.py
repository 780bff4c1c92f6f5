"""The New fine-tune wizard against the real engine: defaults, inline validation, fit, load_spec."""

from __future__ import annotations

import pytest
import yaml
from PySide6.QtCore import Qt

from engine.api.train_spec import TrainSpec
from tests.app.conftest import wait_connected

# Real runs on two shared cores: minutes, not the default two, when the machine is busy.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
CHECK_MS = 90_000  # the first look at a model imports torch in a subprocess (~20 s on 2 cores)


def open_wizard(make_window, qtbot, start: bool = True):
    window = make_window(page="new_finetune", start=start)
    if start:
        wait_connected(qtbot, window)
    return window, window.page("new_finetune")


def test_next_through_the_defaults_gives_a_valid_spec_ready_to_launch(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot)
    assert page.current_step() == 0 and not page.back_button.isEnabled()
    for step in range(1, 6):
        qtbot.mouseClick(page.next_button, Qt.MouseButton.LeftButton)
        assert page.current_step() == step
    assert not page.next_button.isVisible()  # Review is the last step

    qtbot.waitUntil(page.launch_button.isEnabled, timeout=CHECK_MS)
    assert page.blockers() == []
    doc = yaml.safe_load(page.review_step.yaml_view.toPlainText())
    assert doc["kind"] == "train.finetune"
    assert doc["name"] == page.review_step.run_name()
    assert doc["spec"] == page.spec_for_launch()  # the YAML is what Launch sends
    spec = TrainSpec.model_validate(doc["spec"])
    assert spec.task == "text_classification"
    assert spec.model.builtin == "minilm" and spec.data.builtin == "support-tickets"
    assert (spec.method.kind, spec.method.lora_r) == ("lora", 8)
    assert (spec.distributed.strategy, spec.distributed.nproc) == ("single", 1)
    assert (spec.batch_size, spec.max_steps) == (16, 100)
    command = page.review_step.command_view.toPlainText()
    assert command.startswith("ember run ") and "torchrun" not in command

    # Saved as a template, it is offered on the Task step and fills the wizard again.
    page.review_step.save_template("tickets-defaults")
    templates = page.task_step.templates
    qtbot.waitUntil(lambda: templates.count() == 1, timeout=CHECK_MS)
    assert "tickets-defaults" in templates.item(0).text()
    page.go_to(0)
    templates.itemClicked.emit(templates.item(0))
    assert page.current_step() == 5
    assert page.spec_for_launch() == doc["spec"]

    # Two processes: the strategy follows, and the torchrun equivalent is shown.
    page.go_to(4)
    page.training_step.nproc_spin.setValue(2)
    assert page.training_step.strategy_combo.currentData() == "ddp"
    assert "torchrun --nproc-per-node 2 -m engine.recipes.finetune" in \
        page.review_step.command_view.toPlainText()


def test_bad_data_file_shows_file_and_line_under_the_fields(qtbot, make_window, tmp_path):
    no_label = tmp_path / "tickets.csv"
    no_label.write_text("text,category\nprinter is broken,hardware\nlost my password,account\n",
                        encoding="utf-8")
    bad_rows = tmp_path / "rows.csv"
    bad_rows.write_text("text,label\nprinter is broken,hardware\nlost my password,\n"
                        "screen flickers,hardware\n,account\nreset my login,account\n", encoding="utf-8")
    _window, page = open_wizard(make_window, qtbot)
    page.go_to(2)
    data = page.data_step
    data.custom_radio.setChecked(True)
    data.label_column_edit.setText("tag")  # a name the user chose: kept, never replaced by a guess
    data.path_edit.setText(str(no_label))

    column_message = data.field_messages["data.label_column"]
    qtbot.waitUntil(lambda: column_message.isVisible() and "tickets.csv:1" in column_message.text(),
                    timeout=CHECK_MS)
    assert "no column 'tag'" in column_message.text()
    assert not page.launch_button.isEnabled()
    assert any("Data:" in p for p in page.blockers())
    assert str(no_label) in data.issues.text()  # the full list names the file and the fix
    assert "Fix:" in data.issues.text()

    data.label_column_edit.setText("label")
    data.path_edit.setText(str(bad_rows))
    path_message = data.field_messages["data.path"]
    qtbot.waitUntil(lambda: "rows.csv:3" in path_message.text(), timeout=CHECK_MS)
    assert "rows.csv:5" in path_message.text()  # every bad row, not just the first
    assert path_message.isVisible()
    assert not page.launch_button.isEnabled()
    page.go_to(5)
    assert not page.launch_button.isEnabled()
    assert "Fix before launch" in page.review_step.blockers.text()


def test_missing_model_folder_shows_a_message_under_the_field(qtbot, make_window, tmp_path):
    _window, page = open_wizard(make_window, qtbot)
    page.go_to(1)
    model = page.model_step
    model.custom_radio.setChecked(True)
    message = model.field_messages["model.path"]
    assert message.isVisible() and "Choose the model folder" in message.text()
    assert not page.launch_button.isEnabled()

    model.path_edit.setText(str(tmp_path / "no-such-model"))
    qtbot.waitUntil(lambda: "no-such-model" in message.text() and "not found" in message.text(),
                    timeout=CHECK_MS)
    assert message.isVisible()
    assert not page.launch_button.isEnabled()
    assert any(p.startswith("Model:") for p in page.blockers())

    # Back to the built-in model: the message goes and Launch comes back.
    model.builtin_radio.setChecked(True)
    qtbot.waitUntil(page.launch_button.isEnabled, timeout=CHECK_MS)
    assert not message.isVisible()


def test_applying_a_fit_suggestion_changes_the_form(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot)
    page.go_to(4)
    hardware = page.training_step
    hardware.batch_spin.setValue(65536)
    qtbot.waitUntil(lambda: hardware.fit.verdict == "will_not_fit" and bool(hardware.fit.suggestion_buttons),
                    timeout=CHECK_MS)
    assert "Apply:" in hardware.fit.suggestion_buttons[0].text()
    before = page.spec_for_launch()
    qtbot.mouseClick(hardware.fit.suggestion_buttons[0], Qt.MouseButton.LeftButton)
    assert page.spec_for_launch() != before
    qtbot.waitUntil(lambda: hardware.fit.verdict in ("fits", "tight"), timeout=CHECK_MS)


def test_load_spec_fills_every_step_and_round_trips(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot, start=False)
    spec = {
        "task": "image_classification",
        "model": {"arch": "resnet18"},
        "data": {"builtin": "digits", "image_size": 48, "val_fraction": 0.25,
                 "augment": {"horizontal_flip": True, "color_jitter": 0.3}},
        "method": {"kind": "full"},
        "distributed": {"strategy": "deepspeed", "nproc": 2, "zero_stage": 3, "offload_params": True},
        "batch_size": 8, "grad_accum": 4, "max_steps": 7, "precision": "bf16",
        "optim": {"lr": 0.001, "schedule": "cosine"},
        "eval_every": 5, "checkpoint_every": 5,
        "seed": 3, "keep_checkpoints": 4,  # no widget for these: they must survive anyway
    }
    page.load_spec(spec, "dup-of-run-7")
    assert page.current_step() == 5
    assert page.review_step.run_name() == "dup-of-run-7"
    assert page.task_step.task_radios["image_classification"].isChecked()
    assert page.model_step.custom_radio.isChecked()
    assert page.model_step.arch_combo.currentText() == "resnet18"
    assert page.data_step.image_size_spin.value() == 48
    assert page.data_step.flip_check.isChecked()
    assert page.method_step.method_radios["full"].isChecked()
    assert page.training_step.deepspeed_box.isVisibleTo(page.training_step)
    assert page.training_step.offload_params_check.isChecked()
    assert page.errors == {}

    launched = TrainSpec.model_validate(page.spec_for_launch())
    assert launched == TrainSpec.model_validate(spec)
    doc = yaml.safe_load(page.review_step.yaml_view.toPlainText())
    assert doc["name"] == "dup-of-run-7"
    assert TrainSpec.model_validate(doc["spec"]) == TrainSpec.model_validate(spec)

    # A field pydantic rejects is named next to its widget, and blocks Launch.
    page.go_to(4)
    page.training_step.lr_edit.setText("fast")
    message = page.training_step.field_messages["optim"]
    assert message.isVisible() and message.text() == "Learning rate must be a number, such as 0.0005."
    assert "optim.lr" in message.toolTip()
    assert not page.launch_button.isEnabled()


def test_learning_rate_follows_the_method_until_the_user_sets_one(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot, start=False)  # no engine needed: the form alone
    lr = lambda: page.current_spec()["optim"]["lr"]  # noqa: E731
    assert lr() == 2e-3  # LoRA adapters start from zero and want a large rate
    page.method_step.method_radios["full"].click()
    assert lr() == 5e-5  # a full fine-tune of pretrained MiniLM: small, or it forgets what it knows
    page.training_step.lr_edit.setText("0.0001")
    page.method_step.method_radios["lora"].click()
    assert lr() == 1e-4  # the user's choice stays
    assert page.spec_for_launch()["optim"]["lr"] == 1e-4


def test_a_language_model_split_over_processes_round_trips_and_picks_fsdp(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot, start=False)
    spec = {"task": "causal_lm", "method": {"kind": "lora"}, "max_steps": 5,
            "distributed": {"strategy": "fsdp", "nproc": 2, "tensor_parallel": 2}, "activation_checkpointing": True}
    page.load_spec(spec, "tp-run")
    step = page.training_step
    page.go_to(4)
    assert step.tp_field.isVisibleTo(step) and step.tp_spin.value() == 2
    got, want = (TrainSpec.model_validate(s).model_dump() for s in (page.spec_for_launch(), spec))
    # The form keeps what it shows (the wizard fills in the model, data and learning rate it would use).
    assert [got[k] for k in ("distributed", "activation_checkpointing", "max_steps")] == \
        [want[k] for k in ("distributed", "activation_checkpointing", "max_steps")]
    # DDP and DeepSpeed cannot take split matrices; FSDP2 can (and shards the replicas when there are several).
    for strategy in ("ddp", "deepspeed"):
        step.strategy_combo.setCurrentIndex(step.strategy_combo.findData(strategy))
        assert step.strategy_combo.currentData() == "fsdp"
    launched = TrainSpec.model_validate(page.spec_for_launch())
    assert (launched.distributed.tensor_parallel, launched.data_parallel()) == (2, 1)
    # Activation offload is one of the advanced settings, and is summed up while they are folded.
    step.advanced_check.setChecked(True)
    step.act_offload_check.setChecked(True)
    assert page.spec_for_launch()["activation_offload"] is True
    step.advanced_check.setChecked(False)
    assert "activation offload" in step.advanced_summary.text()
    # Two pipeline stages instead: the note says how the processes divide and what the bubble costs.
    step.tp_spin.setValue(1)
    step.pp_spin.setValue(2)
    step.schedule_pp_combo.setCurrentIndex(step.schedule_pp_combo.findData("gpipe"))
    assert step.pp_note.text() == ("1 replica(s) × 2 stages; the pipeline idles 20% of each step (GPipe, 4 "
                                   "micro-batches: (p−1)/(m+p−1)).")
    launched = TrainSpec.model_validate(page.spec_for_launch()).distributed
    assert (launched.pipeline_parallel, launched.pipeline_schedule, launched.pipeline_microbatches) == (2, "gpipe", 4)
    # The fit estimate says where the model is cut (here the reply the engine gives the built-in tiny Llama,
    # tests/engine/test_planner.py), before launch.
    cut = {"split_by": "params", "stages": [[0, 1], [1, 2]], "processes": [0, 1], "stage_params": [115840, 115904]}
    step._on_estimate({"verdict": "fits", "devices": [], "pipeline": cut})
    assert step.pp_note.text().endswith("Stages: embeddings + layer 0 on process 0 | layer 1 + head on process 1 "
                                        "(by parameters).")
    step.split_combo.setCurrentIndex(step.split_combo.findData("time"))
    assert page.spec_for_launch()["distributed"]["pipeline_split"] == "time"
    step._on_estimate({"verdict": "fits", "devices": [], "pipeline": {**cut, "split_by": "time"}})
    assert "(measured at launch; by parameters it would be this)." in step.pp_note.text()
    step.pp_spin.setValue(1)
    # A text classifier is not split: the field is not offered once it is back to 1.
    step.tp_spin.setValue(1)
    page.task_step.task_radios["text_classification"].setChecked(True)
    assert not step.tp_field.isVisibleTo(step)


def test_the_planner_lists_layouts_for_named_gpus_and_applies_one(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot)
    page.load_spec({"task": "causal_lm", "model": {"builtin": "tiny-llama"}, "method": {"kind": "full"},
                    "max_steps": 5, "batch_size": 8}, "plan-me")
    page.go_to(4)
    planner = page.training_step.planner
    # This machine has no GPU: the planner is folded behind one line and a button, then opened.
    qtbot.waitUntil(lambda: planner.open_button.isVisible(), timeout=CHECK_MS)
    assert not planner.body.isVisible() and "no GPU" in planner.cpu_note.text()
    qtbot.mouseClick(planner.open_button, Qt.MouseButton.LeftButton)
    assert planner.body.isVisible() and not planner.open_button.isVisible()
    qtbot.waitUntil(lambda: planner.plan_button.width() > 20, timeout=5000)  # laid out: a click lands on it
    page.stack.currentWidget().ensureWidgetVisible(planner.plan_button)  # scrolled to, as a user would
    qtbot.wait(50)
    planner.gpus_spin.setValue(4)
    planner.memory_spin.setValue(24)
    qtbot.mouseClick(planner.plan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: planner.table.rowCount() > 0 or planner.status.text().startswith("No plan"),
                    timeout=CHECK_MS)
    assert planner.table.rowCount() > 0, planner.status.text()
    best = planner.selected_plan()
    assert best is not None and best["recommended"] and planner.table.item(0, 0).text().startswith("★ ")
    assert "layouts fit" in planner.status.text() and planner.table.item(0, 2).text() == "fits"
    # Apply puts the layout into the form: the spec the wizard would launch has it.
    planner.table.selectRow(min(3, planner.table.rowCount() - 1))
    chosen = planner.selected_plan()
    page.stack.currentWidget().ensureWidgetVisible(planner.apply_button)
    qtbot.wait(50)
    qtbot.mouseClick(planner.apply_button, Qt.MouseButton.LeftButton)
    launched = TrainSpec.model_validate(page.spec_for_launch())
    wanted = chosen["spec_patch"]["distributed"]
    assert (launched.distributed.strategy, launched.distributed.nproc, launched.distributed.tensor_parallel,
            launched.distributed.pipeline_parallel) == (wanted["strategy"], 4, wanted["tensor_parallel"],
                                                       wanted["pipeline_parallel"])
    assert launched.activation_checkpointing == chosen["spec_patch"]["activation_checkpointing"]


def test_a_cpu_run_greys_the_gpu_only_speed_choices_and_says_which_machine_runs_it(qtbot, make_window):
    _window, page = open_wizard(make_window, qtbot, start=False)
    page.go_to(4)
    step = page.training_step
    speed = step.speed
    flash = speed.attention_combo.model().item(speed.attention_combo.findData("flash_attention_2"))
    assert not flash.isEnabled() and "CUDA GPU" in flash.toolTip()
    assert speed.cpu_note.isVisibleTo(speed) and "torch.compile off" in speed.cpu_note.text()
    assert step.where_note.text().startswith("This machine:")
    step.device_combo.setCurrentIndex(step.device_combo.findData("cuda"))  # a GPU named: its choices are offered
    assert flash.isEnabled() and not speed.cpu_note.isVisibleTo(speed)
