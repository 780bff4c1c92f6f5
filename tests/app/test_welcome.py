"""Welcome page, guided tour and empty states: each lands where it says, with a real engine."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.models.pages import PAGE_KEYS
from engine.api.train_spec import TrainSpec
from engine.cli.client import BlockingClient
from tests.app.conftest import wait_connected

WAIT_MS = 30_000
RUN_WAIT_MS = 180_000  # a real (tiny) fine-tune on two shared cores


def current_key(window) -> str:
    return PAGE_KEYS[window.sidebar.currentRow()]


def test_welcome_buttons_and_recent_runs(qtbot, make_window, gui_home):
    window = make_window(page="welcome")
    assert current_key(window) == "welcome" and PAGE_KEYS[0] == "welcome"
    wait_connected(qtbot, window)
    welcome = window.page("welcome")
    qtbot.waitUntil(lambda: welcome.recent_stack.currentWidget() is welcome.recent_empty, timeout=10_000)
    assert "first fine-tune will appear here" in welcome.recent_empty.text_label.text()

    # Built-in: the wizard back at step 1 with text classification, MiniLM, the tickets and LoRA,
    # whatever was changed there before.
    wizard = window.page("new_finetune")
    wizard.task_step.task_radios["image_classification"].setChecked(True)
    wizard.go_to(3)
    qtbot.mouseClick(welcome.builtin_button, Qt.MouseButton.LeftButton)
    assert window.stack.currentWidget() is wizard and wizard.current_step() == 0
    spec = TrainSpec.model_validate(wizard.spec_for_launch())
    assert (spec.task, spec.method.kind) == ("text_classification", "lora")
    assert (spec.model_name(), spec.data_name()) == ("minilm", "support-tickets")

    # Tune and chat: step 1 with SmolLM2, the short-answers data and LoRA, sized for a CPU.
    window.show_page("welcome")
    qtbot.mouseClick(welcome.chat_button, Qt.MouseButton.LeftButton)
    assert window.stack.currentWidget() is wizard and wizard.current_step() == 0
    spec = TrainSpec.model_validate(wizard.spec_for_launch())
    assert (spec.task, spec.method.kind, spec.objective) == ("causal_lm", "lora", "sft")
    assert (spec.model_name(), spec.data_name()) == ("smollm2-135m-instruct", "short-answers")
    assert (spec.max_steps, spec.batch_size, spec.data.max_length, spec.optim.lr) == (40, 8, 48, 0.003)
    assert spec.generate_eval.prompts == 30

    # My data: the Data step, "My data" chosen, the file field focused.
    window.show_page("welcome")
    qtbot.mouseClick(welcome.own_data_button, Qt.MouseButton.LeftButton)
    assert window.stack.currentWidget() is wizard
    assert wizard.steps[wizard.current_step()] is wizard.data_step
    assert wizard.data_step.custom_radio.isChecked()
    assert window.focusWidget() is wizard.data_step.path_edit

    # A past run: the Runs page.
    window.show_page("welcome")
    qtbot.mouseClick(welcome.open_run_button, Qt.MouseButton.LeftButton)
    assert window.stack.currentWidget() is window.page("runs")

    # A finished job shows up in Recent runs (a machine probe does not: it is no run); a double-click
    # opens it on Monitor, and so does Enter.
    window.show_page("welcome")
    quick = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 2,
             "eval_every": 10_000, "checkpoint_every": 10_000, "device": "cpu"}  # the digits CNN: quickest
    with BlockingClient.connect(gui_home, client="test", timeout=30) as other:
        probe = other.call("jobs.start", kind="system.probe", spec={}, name="quick probe")
        job = other.call("jobs.start", kind="train.finetune", spec=quick, name="quick run")
        qtbot.waitUntil(lambda: welcome.recent_ids() == [job["id"]] and "succeeded" in
                        welcome.recent_list.item(0).text(), timeout=RUN_WAIT_MS)
        qtbot.waitUntil(lambda: other.call("jobs.get", id=probe["id"])["state"] == "succeeded", timeout=WAIT_MS)
    qtbot.wait(200)  # its last jobs event has reached the window
    assert welcome.recent_ids() == [job["id"]]
    assert welcome.recent_stack.currentWidget() is welcome.recent_list
    assert welcome.recent_list.item(0).text().startswith("quick run")
    list_ = welcome.recent_list
    centre = list_.visualItemRect(list_.item(0)).center()
    qtbot.mouseClick(list_.viewport(), Qt.MouseButton.LeftButton, pos=centre)  # a real double-click's first press
    qtbot.mouseDClick(list_.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    monitor = window.page("monitor")
    assert window.stack.currentWidget() is monitor and monitor.job_id == job["id"]

    monitor.show_run("nothing")  # forget it, so Enter below has something to change
    window.show_page("welcome")
    list_.setCurrentRow(0)
    qtbot.keyClick(list_, Qt.Key.Key_Return)
    assert window.stack.currentWidget() is monitor and monitor.job_id == job["id"]


def test_tour_walks_every_step_and_remembers_it(qtbot, make_window):
    from app.state.prefs import prefs
    from app.widgets.tour import tour_for

    window = make_window(start=False, page="runs")
    assert not prefs().get("tour_done")
    tour = tour_for(window)
    assert tour_for(window) is tour  # one tour per window
    window.page("welcome").tour_button.click()
    assert tour.active and tour.step_index == 0
    n = len(tour.steps)
    assert 5 <= n <= 10 and [s.page for s in tour.steps][:2] == ["welcome", "new_finetune"]
    seen = []
    for i in range(n):
        assert tour.step_index == i
        assert tour.bubble.isVisible() and tour.bubble.counter.text() == f"Step {i + 1} of {n}"
        assert current_key(window) == tour.steps[i].page  # the page it talks about is open
        item = window.sidebar.item(PAGE_KEYS.index(tour.steps[i].page))
        item_rect = window.sidebar.visualItemRect(item)
        top_left = window.sidebar.viewport().mapTo(window, item_rect.topLeft())
        assert tour.highlight.geometry().contains(top_left)  # the outline is on that sidebar item
        assert tour.bubble.geometry().left() > tour.highlight.geometry().right()  # beside it
        assert len(tour.bubble.text.text().split(". ")) <= 2
        seen.append(tour.bubble.title.text())
        if i == 2:
            tour.back()
            assert tour.step_index == 1 and tour.bubble.counter.text() == f"Step 2 of {n}"
            tour.next()
        if i < n - 1:
            assert tour.bubble.next_button.text() == "Next"
            qtbot.mouseClick(tour.bubble.next_button, Qt.MouseButton.LeftButton)
    assert len(set(seen)) == n
    assert tour.bubble.next_button.text() == "Done" and not prefs().get("tour_done")
    qtbot.mouseClick(tour.bubble.next_button, Qt.MouseButton.LeftButton)
    assert not tour.active and not tour.bubble.isVisible() and not tour.highlight.isVisible()
    assert prefs().get("tour_done") is True
    assert current_key(window) == "runs"  # back where it began

    # Again, and Skip tour ends it at once; Esc does too.
    prefs().set("tour_done", False)
    tour.start()
    tour.next()
    qtbot.mouseClick(tour.bubble.skip_button, Qt.MouseButton.LeftButton)
    assert not tour.active and prefs().get("tour_done") is True
    tour.start()
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5000)
    qtbot.keyClick(tour.bubble.next_button, Qt.Key.Key_Escape)
    assert not tour.active and not tour.bubble.isVisible()


def test_first_run_tour_only_when_not_done(qtbot, make_window):
    from app.state.prefs import prefs
    from app.widgets.tour import start_first_run_tour, tour_for

    window = make_window(start=False, page="welcome")
    assert window.findChild(type(tour_for(window))) is not None
    prefs().set("tour_done", True)
    assert not start_first_run_tour(window)
    prefs().set("tour_done", False)
    assert start_first_run_tour(window)
    window.update()
    qtbot.waitUntil(lambda: tour_for(window).active, timeout=5000)
    tour_for(window).finish()


def test_empty_states_on_a_fresh_home_lead_somewhere(qtbot, make_window):
    window = make_window(page="runs")
    wait_connected(qtbot, window)

    def lands(button, key: str) -> None:
        assert button is not None and button.isVisibleTo(window)
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert current_key(window) == key, f"{button.text()} went to {current_key(window)}, not {key}"

    runs = window.page("runs")
    qtbot.waitUntil(lambda: runs.list_stack.currentWidget() is runs.empty, timeout=10_000)
    assert runs.empty.title_label.text() == "No runs yet"
    lands(runs.empty.action_button, "new_finetune")

    monitor = window.show_page("monitor")
    assert monitor.body.currentWidget() is monitor.empty
    lands(monitor.empty.action_button, "new_finetune")

    compare = window.show_page("compare")
    assert compare.body.currentWidget() is compare.empty
    lands(compare.empty.action_button, "runs")

    compress = window.show_page("compress")
    note = compress.source_step.empty_note
    qtbot.waitUntil(lambda: note.isVisible() and not compress.source_step.source_list.isVisible(), timeout=10_000)
    assert "compress" in note.title_label.text()
    lands(note.action_button, "new_finetune")

    export = window.show_page("export")
    note = export.source_step.empty_note
    qtbot.waitUntil(lambda: note.isVisible(), timeout=10_000)
    lands(note.action_button, "new_finetune")

    compare = window.show_page("compare")
    compare.tabs.setCurrentWidget(compare.variants)
    variants = compare.variants
    assert variants.empty.isVisible() and not variants.no_variants.isVisible()
    lands(variants.empty.action_button, "compress")

    hosts = window.show_page("hosts")
    qtbot.waitUntil(lambda: hosts.empty_state.isVisible(), timeout=10_000)
    qtbot.waitUntil(hosts.empty_add_button.isEnabled, timeout=10_000)
    qtbot.mouseClick(hosts.empty_add_button, Qt.MouseButton.LeftButton)
    assert hosts.host_dialog is not None and hosts.host_dialog.isVisible()
    hosts.host_dialog.reject()


def test_variants_without_variants_say_go_compress(qtbot, make_window):
    """A parent the engine answers for with no variants (the reply a fresh parent gets)."""
    window = make_window(start=False, page="compare")
    compare = window.page("compare")
    variants = compare.variants
    parent = {"id": "r-parent", "kind": "train.finetune", "name": "tickets", "state": "succeeded",
              "spec": {"task": "text_classification"}}
    compare.show_variants("r-parent")
    variants._on_variants("r-parent", {"parent": parent, "parent_evaluation": None, "variants": []})
    assert variants.no_variants.isVisible() and not variants.body.isVisible()
    assert variants.no_variants.title_label.text() == "No variants yet"
    qtbot.mouseClick(variants.no_variants.action_button, Qt.MouseButton.LeftButton)
    assert current_key(window) == "compress"


def test_recent_runs_leave_out_system_jobs_and_name_variants_by_their_parent(qtbot):
    from app.pages.welcome import RECENT_LIMIT, WelcomePage
    from tests.app.test_compress_wizard import fake_engine, settle
    from tests.app.test_runs_page import canned_jobs

    jobs = canned_jobs()
    probe, _mine, _pruned, export, int8, _parent = jobs
    engine = fake_engine({"jobs.list": {"jobs": jobs}})
    page = WelcomePage(engine)
    qtbot.addWidget(page)
    settle(qtbot, engine.client)
    # Enough records that probes cannot crowd the runs out, and that a variant's parent is at hand.
    assert engine.client.sent("jobs.list")[0]["limit"] > RECENT_LIMIT
    assert probe["id"] not in page.recent_ids() and len(page.recent_ids()) == len(jobs) - 1
    lines = {page.recent_list.item(i).data(Qt.ItemDataRole.UserRole): page.recent_list.item(i).text()
             for i in range(page.recent_list.count())}
    assert lines[int8["id"]].startswith("int8 of text-lora-1201-1932  ·  Quantization  ·  succeeded")
    assert lines[export["id"]].startswith("export of int8 of text-lora-1201-1932  ·  Export")
    engine.client.publish("jobs", {**probe, "id": "r-probe-2", "state": "running"})  # a probe started now
    assert "r-probe-2" not in page.recent_ids()
