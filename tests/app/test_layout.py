"""Every page lays out in a 1024 x 700 window, and scrolls rather than widening or growing it.

A page's minimum size hint sets the window's: one page that asks for more makes the whole
window too big for a small screen or half of a larger one, whichever page is showing. The
stylesheet is applied (its padding counts) and the engine is not started, so the
connection banner takes its row too, as it does while the engine starts.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSize
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget

from app.models.pages import PAGE_KEYS
from app.state import style

SMALL = QSize(1024, 700)


@pytest.fixture
def styled(qapp):
    """The light theme's stylesheet and palette for the test; the previous look after it."""
    sheet, palette = qapp.styleSheet(), QPalette(qapp.palette())
    style.apply_theme(qapp, "light")
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)


def fits(size: QSize) -> bool:
    return size.width() <= SMALL.width() and size.height() <= SMALL.height()


def show(widget: QWidget) -> None:
    """Let layouts settle: hints and scroll bars update on posted events."""
    for _ in range(3):
        QApplication.processEvents()
    widget.updateGeometry()
    QApplication.processEvents()


def sideways_scrolling(page: QWidget) -> list[str]:
    """The visible scroll areas of ``page`` whose content is wider than they are at this size."""
    wide = []
    for scroll in page.findChildren(QScrollArea):
        if scroll.isVisibleTo(page) and scroll.widgetResizable() and scroll.horizontalScrollBar().maximum() > 0:
            body = scroll.widget()
            wide.append(f"{scroll.objectName() or type(scroll.parentWidget()).__name__}: content "
                        f"{body.minimumSizeHint().width()} px wide in {scroll.viewport().width()} px")
    return wide


def steps_of(page: QWidget) -> list[int]:
    """The wizard steps of a page (New fine-tune, Compress, Export), else no steps."""
    stack = getattr(page, "stack", None)
    return list(range(stack.count())) if stack is not None and hasattr(page, "step_buttons") else []


def layout_problems(window, page: QWidget, where: str) -> list[str]:
    problems = []
    if not fits(window.minimumSizeHint()):
        hint, page_hint = window.minimumSizeHint(), page.minimumSizeHint()
        problems.append(f"{where}: the window needs at least {hint.width()} x {hint.height()} "
                        f"(the page {page_hint.width()} x {page_hint.height()})")
    problems += [f"{where}: scrolls sideways ({wide})" for wide in sideways_scrolling(page)]
    return problems


def test_every_page_and_wizard_step_fits_1024_by_700_and_so_does_the_window_after_all(styled, make_window, qtbot):
    """One window visits every page, and every step of the wizards, in the sidebar's order. Pages are built on
    first show and stay in the stack, so the largest one visited sets the window's minimum: a problem is named
    at the first page that causes it (its own hint is in the message)."""
    window = make_window(start=False, page="welcome")
    problems: list[str] = []
    for key in PAGE_KEYS:
        page = window.show_page(key)
        window.resize(SMALL)
        show(window)
        problems += layout_problems(window, page, key)
        for step in steps_of(page):
            page.stack.setCurrentIndex(step)  # directly: a step's checks may not let go_to reach it
            show(window)
            problems += layout_problems(window, page, f"{key} step {step + 1} ({page.steps[step].title})")
    assert not problems, "\n".join(problems)
    hint = window.minimumSizeHint()
    assert fits(hint), f"after visiting every page the window needs {hint.width()} x {hint.height()}"
    window.resize(SMALL)
    show(window)
    assert window.size() == SMALL


def test_pages_full_of_data_still_fit(styled, make_window, qtbot):
    """Compare's variants (a table, a chart, per-class figures) and Compress with runs to pick, on canned replies."""
    from app.pages.compare import ComparePage
    from app.pages.compress import CompressPage
    from tests.app.test_compress_wizard import LORA, fake_engine, settle
    from tests.app.test_variants import DYNAMIC, PARENT_ID, PRUNED, STATIC, variants_reply

    window = make_window(start=False, page="welcome")
    window.resize(SMALL)
    show(window)
    area = window.stack.size()  # what a page gets in a 1024 x 700 window

    engine = fake_engine({"compress.variants": variants_reply(DYNAMIC, PRUNED, STATIC),
                          "jobs.list": {"jobs": [LORA]}})
    compare = ComparePage(engine)
    compress = CompressPage(engine)
    for page in (compare, compress):
        qtbot.addWidget(page)
        page.resize(area)
        page.show()
    compare.show_variants(PARENT_ID)
    compare.variants.select_run("r-static")
    settle(qtbot, engine.client)
    show(compare)
    assert len(compare.variants.rows()) == 4 and compress.source_list.topLevelItemCount() >= 1  # the data did arrive
    problems = []
    for name, page in (("Compare > Variants", compare), ("Compress", compress)):
        hint = page.minimumSizeHint()
        if hint.width() > area.width() or hint.height() > area.height():
            problems.append(f"{name} needs {hint.width()} x {hint.height()} of {area.width()} x {area.height()}")
        problems += [f"{name}: scrolls sideways ({wide})" for wide in sideways_scrolling(page)]
    assert not problems, "\n".join(problems)


def test_add_host_keeps_its_fields_whole_while_it_shows_errors(styled, qtbot):
    from PySide6.QtWidgets import QLabel

    from app.pages.hosts.host_dialog import HostDialog

    dialog = HostDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    show(dialog)
    before = {key: edit.size() for key, edit in dialog.edits.items()}
    dialog.edits["name"].setText("gpu box!")
    dialog.submit()  # checked here first: the name's characters, the address missing
    assert dialog.error_for("name") and dialog.error_for("address") == "required"
    long = {"name": "a host named gpu-box exists already; pick another name or edit that host",
            "address": "the address could not be resolved: check the spelling, or use the IP address"}
    dialog.show_errors([{"field": f"host.{key}", "message": text} for key, text in long.items()],
                       message="The engine refused the host.")
    show(dialog)
    for key, text in long.items():
        edit = dialog.edits[key]
        assert edit.height() >= edit.sizeHint().height(), f"{key} squeezed to {edit.height()} px high"
        assert edit.width() >= max(edit.minimumWidth(), before[key].width()) > 200, f"{key} narrowed"
        error = next(w for w in dialog.findChildren(QLabel) if w.text() == text)
        assert error.isVisible() and error.width() <= edit.width() + 1  # wrapped under its field
        assert error.height() >= error.heightForWidth(error.width()), f"{key}'s message is cut"
    assert dialog.edits["name"].fontMetrics().horizontalAdvance("gpu box!") < dialog.edits["name"].width()
    assert dialog.form_scroll.verticalScrollBar().maximum() == 0  # the dialog grew rather than scroll
    assert dialog.message.isVisible() and dialog.message.height() >= dialog.message.heightForWidth(
        dialog.message.width())


def test_the_playground_serving_side_by_side_still_fits(styled, make_window, qtbot):
    """Serving (its bar folded: the URL, the figures, Details) with two models side by side: still 1024 px wide,
    and the conversation keeps most of a 1366 x 800 window's height."""
    window = make_window(start=False, page="welcome")
    page = window.show_page("playground")
    bar = page.serve_bar
    bar.job_id, bar.url = "r1", "http://127.0.0.1:41234/v1"
    bar._on_event("t", 1, {"url": bar.url, "model": "smollm2-135m-instruct", "requests": 3, "requests_per_s": 0.5,
                           "tokens_per_s": 20.3, "queue": 0, "errors": 0, "ttft_p50_s": 0.2})
    page.side_check.setChecked(True)
    window.resize(SMALL)
    show(window)
    assert bar.isVisible() and not bar.chart.isVisible()
    assert not layout_problems(window, page, "playground serving, side by side")
    window.resize(1366, 800)
    show(window)
    assert page.stack.height() >= 400 and bar.height() <= 60
    bar.details_button.setChecked(True)  # the chart and the load test, on demand
    show(window)
    assert bar.chart.isVisible() and bar.load_button.isVisible()
