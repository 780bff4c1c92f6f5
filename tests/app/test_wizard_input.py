"""What the forms do with the user's input: the wheel never changes an unfocused control, a value
below a field's minimum is explained (not reverted), messages name fields as the form shows them,
the data file's columns are offered, every field explains itself, and the Training step folds its
advanced settings and fits a narrow window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QLineEdit,
    QListWidget,
    QRadioButton,
    QScrollArea,
    QWidget,
)

from app.models.field_labels import field_message, label_for, on_screen
from app.widgets.fit_bars import FitBars, Legend
from app.widgets.wheel_guard import is_value_control
from tests.app.conftest import wait_connected

CHECK_MS = 90_000


def wheel(widget: QWidget, notches: int = -3) -> None:
    """A mouse-wheel turn over the middle of ``widget`` (down for negative notches)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0),
                        QPoint(0, 120 * notches), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def value_of(widget: QWidget):
    if isinstance(widget, QComboBox):
        return widget.currentIndex()
    return widget.value()


def value_controls(root: QWidget) -> list[QWidget]:
    return [w for w in root.findChildren(QWidget) if is_value_control(w) and w.isEnabled()]


def check_wheel_changes_nothing(root: QWidget) -> int:
    controls = value_controls(root)
    for control in controls:
        assert control.focusPolicy() != Qt.FocusPolicy.WheelFocus, control  # the wheel never gives focus
        before = value_of(control)
        wheel(control, -3)
        wheel(control, +3)
        wheel(control, -1)
        assert value_of(control) == before, f"the wheel changed {type(control).__name__} " \
                                            f"{control.accessibleName() or control.toolTip()[:60]!r}"
    return len(controls)


def test_the_wheel_changes_no_unfocused_control_on_any_wizard_step_or_form(qtbot, make_window):
    window = make_window(start=False, page="new_finetune")
    window.resize(1024, 700)
    checked = 0
    wizard = window.page("new_finetune")
    wizard.training_step.advanced_check.setChecked(True)
    wizard.data_step.custom_radio.setChecked(True)
    for key in ("new_finetune", "compress", "export"):
        page = window.show_page(key)
        for index in range(page.stack.count()):
            page.stack.setCurrentIndex(index)
            checked += check_wheel_changes_nothing(page.stack.currentWidget())
    for key in ("settings", "hosts", "runs", "compare", "monitor"):
        checked += check_wheel_changes_nothing(window.show_page(key))
    from app.pages.hosts.host_dialog import HostDialog

    dialog = HostDialog(None, window)
    qtbot.addWidget(dialog)
    dialog.show()  # polished as it is shown, as any dialog is before a wheel can reach it
    checked += check_wheel_changes_nothing(dialog)
    assert checked > 40  # every drop-down and spin box of the wizards and forms was tried

    # The page scrolls instead, as the user meant; a focused control still takes the wheel.
    wizard = window.show_page("new_finetune")
    wizard.go_to(4)
    qtbot.wait(50)
    area = wizard.stack.currentWidget()
    assert isinstance(area, QScrollArea)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0  # the Training step with its advanced settings is taller than 700 px
    bar.setValue(0)
    combo = wizard.training_step.schedule_combo
    before = combo.currentIndex()
    wheel(combo, -3)
    assert bar.value() > 0 and combo.currentIndex() == before
    spin = wizard.training_step.batch_spin
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=2000)
    wheel(spin, +1)
    assert spin.value() != 16


def test_a_value_below_the_minimum_is_explained_not_reverted(qtbot, make_window):
    window = make_window(start=False, page="new_finetune")
    page = window.page("new_finetune")
    page.go_to(4)
    hardware = page.training_step
    hardware.batch_spin.setValue(0)
    assert hardware.batch_spin.value() == 0  # kept, as the user typed it
    message = hardware.field_messages["batch_size"]
    assert message.isVisible() and message.text() == "Batch size must be at least 1."
    assert "batch_size" in message.toolTip()  # the job file's key, for whoever edits the YAML
    assert "Batch size must be at least 1." in page.blockers()
    assert not page.launch_button.isEnabled()
    hardware.lr_edit.setText("0")
    assert hardware.field_messages["optim"].text() == "Learning rate must be more than 0."
    hardware.batch_spin.setValue(8)
    hardware.lr_edit.setText("0.001")
    assert not message.isVisible() and page.errors == {}


def test_messages_name_fields_by_their_labels():
    assert label_for("optim.lr") == "Learning rate" and label_for("data.augment.horizontal_flip") == "data.augment.horizontal_flip"
    assert field_message("data.max_length", "Input should be greater than or equal to 8") == \
        "Tokens per example must be at least 8."
    assert field_message("method.lora_r", "Input should be a valid integer") == "LoRA rank must be a whole number."
    assert on_screen("set data.text_column to the column that holds the text") == \
        "set “Text column” to the column that holds the text"
    assert on_screen("see my.data.path and data.paths") == "see my.data.path and data.paths"  # whole keys only


def test_every_wizard_field_has_a_tooltip(qtbot, make_window):
    window = make_window(start=False, page="new_finetune")
    page = window.page("new_finetune")
    page.training_step.advanced_check.setChecked(True)
    fields = (QAbstractSpinBox, QComboBox, QLineEdit, QCheckBox, QRadioButton, QListWidget)
    missing = []
    for step in page.steps:
        for widget in step.findChildren(QWidget):
            parent = widget.parentWidget()
            inner = isinstance(parent, (QAbstractSpinBox, QComboBox))  # a spin box's or drop-down's own editor
            if isinstance(widget, fields) and not inner and not widget.toolTip():
                missing.append(f"{step.title}: {type(widget).__name__} {widget.text() if hasattr(widget, 'text') else ''}")
    assert not missing, "fields without a tooltip:\n" + "\n".join(missing)
    for widget in (page.training_step.strategy_combo, page.training_step.lr_edit, page.training_step.batch_spin):
        assert "Job file:" in widget.toolTip() and "<b>" in widget.toolTip()


def test_the_training_step_folds_advanced_settings_and_fits_a_narrow_window(qtbot, make_window):
    window = make_window(start=False, page="new_finetune")
    window.resize(1024, 700)
    page = window.page("new_finetune")
    page.go_to(4)
    hardware = page.training_step
    qtbot.wait(50)
    assert not hardware.advanced_check.isChecked()
    assert not hardware.schedule_combo.isVisible() and not hardware.eval_every_spin.isVisible()
    summary = hardware.advanced_summary.text()
    assert "linear schedule" in summary and "evaluate every 50" in summary and "speed: all auto" in summary
    # Narrow: the estimate goes under the form, and nothing needs a sideways scroll.
    area = page.stack.currentWidget()
    assert area.horizontalScrollBar().maximum() == 0
    # A problem in a folded field unfolds them; so does a loaded spec that sets one.
    hardware.eval_every_spin.setValue(0)
    assert hardware.advanced_check.isChecked() and hardware.eval_every_spin.isVisible()
    assert hardware.field_messages["eval_every"].text() == "Evaluate every must be at least 1."
    hardware.advanced_check.setChecked(False)
    hardware.eval_every_spin.setValue(50)
    page.load_spec({"task": "text_classification", "grad_accum": 4})
    assert hardware.advanced_check.isChecked() and hardware.accum_spin.value() == 4


def test_the_fit_card_names_each_device_once_and_its_legend_wraps(qtbot):
    bars = FitBars()
    qtbot.addWidget(bars)
    parts = {"weights": 1, "gradients": 1, "optimizer": 1, "activations": 1, "overhead": 1}
    bars.set_estimate({"verdict": "fits", "devices": [
        {"name": "CPU (rank 0)", "kind": "cpu", "rank": 0, "capacity": 100, "parts": parts, "total": 5},
        {"name": "cuda:1 NVIDIA H200", "kind": "cuda", "rank": 1, "capacity": 100, "parts": parts, "total": 5}]})
    names = [w.text() for w in bars.findChildren(QWidget) if hasattr(w, "text") and "rank" in str(w.text())]
    assert "CPU (rank 0)" in names and "cuda:1 NVIDIA H200 (rank 1)" in names
    assert not any("(rank 0) (rank 0)" in n for n in names)
    legend = Legend()
    qtbot.addWidget(legend)
    wide, narrow = legend.sizeHint().width(), 150
    assert legend.heightForWidth(wide) == Legend.ROW
    assert legend.heightForWidth(narrow) > Legend.ROW  # wrapped, not cut
    metrics = legend.fontMetrics()
    for x, _row, name, _colour in legend._places(narrow):
        assert x + 14 + metrics.horizontalAdvance(name) <= narrow


def test_the_wizard_buttons_stay_put_when_the_start_text_grows(qtbot, make_window):
    window = make_window(start=False, page="compress")
    page = window.page("compress")
    qtbot.wait(50)
    back_x, next_x = page.back_button.x(), page.next_button.x()
    page.run_button.setText("Start 3 jobs")
    qtbot.wait(50)
    assert (page.back_button.x(), page.next_button.x()) == (back_x, next_x)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_data_files_columns_are_offered_with_a_guess(qtbot, make_window, tmp_path):
    data = tmp_path / "messages.csv"
    rows = ["id,msg,category"] + [f"{i},{text} number {i},{label}" for i, (text, label) in enumerate(
        [("the printer on floor two is jammed again", "hardware"), ("I forgot the password to my account", "account"),
         ("my screen flickers after the update", "hardware"), ("please reset the login for my account", "account")] * 3)]
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    page.go_to(2)
    step = page.data_step
    step.custom_radio.setChecked(True)
    step.path_edit.setText(str(data))
    qtbot.waitUntil(lambda: step.text_column_edit.text() == "msg" and step.label_column_edit.text() == "category",
                    timeout=CHECK_MS)
    offered = [step.label_column_edit.itemText(i) for i in range(step.label_column_edit.count())]
    assert offered == ["id", "msg", "category"]
    assert "text column 'msg'" in step.columns_note.text() and step.columns_note.isVisible()
    qtbot.waitUntil(lambda: not step.busy() and bool(step.preview.sizes.text()), timeout=CHECK_MS)
    assert step.blocking() == []
    # Only 2 of 12 rows are held out (one per class): the form warns, and counts classes on the other 10.
    assert "Only 2 examples held out for validation" in step.preview.val_warning.text()
    assert sum(step.preview.balance.counts.values()) == 10

    # A column the user names is never replaced; a wrong one is explained with the field's label.
    step.label_column_edit.setText("topic")
    qtbot.waitUntil(lambda: "no column 'topic'" in step.issues.text(), timeout=CHECK_MS)
    assert step.label_column_edit.text() == "topic"
    assert "“Label column”" in step.issues.text() and "data.label_column" not in step.issues.text()


def test_a_docs_mention_in_an_issue_opens_the_manual(qtbot, monkeypatch):
    from app.pages.new_finetune import parts

    opened = []
    monkeypatch.setattr("app.shell.help.open_doc", lambda widget, target="": opened.append(target))
    issues = parts.IssueList()
    qtbot.addWidget(issues)
    issues.set_issues([{"message": "build_model returned no module", "file": "my_model.py", "line": 3,
                        "hint": "return a torch.nn.Module; see docs/custom-models.md"}])
    fix = [w for w in issues.findChildren(parts.QLabel) if "Fix:" in w.text()][0]
    assert 'href="' in fix.text() and "custom-models.md" in fix.text()
    fix.linkActivated.emit(fix.text().split('href="', 1)[1].split('"', 1)[0])
    assert opened and opened[0].endswith("custom-models.md")


def test_a_chart_scrolls_the_page_until_clicked_and_zooms_with_ctrl(qtbot):
    """Monitor is mostly charts: the wheel over one scrolls the page; a clicked chart (or Ctrl) zooms."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QVBoxLayout

    from app.widgets import wheel_guard

    wheel_guard.install()
    area = QScrollArea()
    inner = QWidget()
    column = QVBoxLayout(inner)
    plot = pg.PlotWidget()
    plot.plot([0, 1, 2, 3], [0, 1, 4, 9])
    plot.setMinimumHeight(300)
    column.addWidget(plot)
    column.addSpacing(1500)  # a page taller than its window
    area.setWidget(inner)
    area.resize(400, 400)
    qtbot.addWidget(area)
    area.show()
    qtbot.waitExposed(area)
    assert plot.focusPolicy() == Qt.FocusPolicy.ClickFocus
    bar, box = area.verticalScrollBar(), plot.getPlotItem().getViewBox()
    box.autoRange()
    before = box.viewRange()
    wheel(plot.viewport(), -3)
    assert bar.value() > 0 and box.viewRange() == before  # the page scrolled; the chart kept its range

    bar.setValue(0)
    plot.setFocus()
    qtbot.waitUntil(plot.hasFocus, timeout=2000)
    wheel(plot.viewport(), +3)
    assert bar.value() == 0 and box.viewRange() != before  # clicked: the chart zooms, the page stays

    area.setFocus()  # the chart loses focus: Ctrl + wheel still zooms it
    qtbot.waitUntil(lambda: not plot.hasFocus(), timeout=2000)
    zoomed = box.viewRange()
    centre = QPointF(plot.viewport().rect().center())
    QApplication.sendEvent(plot.viewport(), QWheelEvent(
        centre, QPointF(plot.viewport().mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, 360),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.ControlModifier, Qt.ScrollPhase.NoScrollPhase, False))
    assert bar.value() == 0 and box.viewRange() != zoomed


def test_a_check_out_of_time_is_asked_again_by_itself_three_times_then_shown(qtbot):
    from app.pages.new_finetune.parts import CHECK_RETRIES, Busy, asked_again
    from engine.api.protocol import INTERNAL_ERROR, RpcError

    class Request:
        def __init__(self):
            self.asked: list[int] = []

        def again_in(self, ms: int) -> None:
            self.asked.append(ms)

    status, request = Busy(), Request()
    qtbot.addWidget(status)
    late = RpcError(INTERNAL_ERROR, "Looking at the inputs took over 120 s: this machine is busy (load 7.5 on 2 "
                    "cores)", {"hint": "It is checked again by itself", "retry_after_s": 10, "timeout": True})
    assert all(asked_again(late, tries, status, request) for tries in range(CHECK_RETRIES))
    assert request.asked == [10_000] * CHECK_RETRIES and "busy (load 7.5 on 2 cores). Checking again" in status.text()
    assert not asked_again(late, CHECK_RETRIES, status, request)  # then the error is shown, with its hint
    assert not asked_again(RpcError(INTERNAL_ERROR, "The input check failed"), 0, status, request)
