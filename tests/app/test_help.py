"""Help: the manual that ships with the package, its viewer, the Help menu, F1 per page, About, the tour.

Windows here mostly run without an engine (the help works offline, and with no engine at all);
About is checked once against a real engine for the versions it reports.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt, QUrl, qVersion
from PySide6.QtGui import QGuiApplication, QTextCursor, QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractButton

from app.models.pages import PAGE_KEYS, PAGES
from app.shell import help as app_help
from app.shell.help import PAGE_DOCS, doc_label, linkify, page_doc
from app.text import manual
from app.text.manual import docs_dir, heading_slug
from tests.app.conftest import wait_connected

ROOT = Path(__file__).resolve().parents[2]


def current_key(window) -> str:
    return PAGES[window.sidebar.currentRow()].key


def headings(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub (and the viewer) make them."""
    taken: dict[str, int] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    in_code = False
    found = set()
    for line in lines:
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            text = re.sub(r"[`*]", "", line.lstrip("#").strip())
            found.add(heading_slug(text, taken))
    return found


def heading_top(browser, anchor: str) -> int:
    """Where the heading with ``anchor`` is drawn, in viewport pixels from the top."""
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            if anchor in it.fragment().charFormat().anchorNames():
                return browser.cursorRect(QTextCursor(block)).top()
            it += 1
        block = block.next()
    raise AssertionError(f"no heading #{anchor} in {browser.source().toString()}")


def scrolled_to(browser, anchor: str) -> bool:
    """The heading is at the top of the view, or as high as it goes (near the end of its doc)."""
    top, bar = heading_top(browser, anchor), browser.verticalScrollBar()
    return 0 <= top < 40 or (bar.value() == bar.maximum() and 0 <= top < browser.viewport().height() - 20)


# -- the docs ship, and every page's help exists -----------------------------------------------

def test_the_manual_is_found_and_ships_with_the_package():
    folder = docs_dir()
    assert folder is not None and (folder / "first-run.md").is_file()
    # The package's copy is the repository's docs (a link in a checkout): every doc is there.
    shipped = ROOT / "app" / "resources" / "docs"
    assert {p.name for p in (ROOT / "docs").glob("*.md")} <= {p.name for p in shipped.glob("*.md")}
    assert (shipped / "images" / "welcome.png").is_file()
    # ... and the wheel and the one-folder build take it along.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"resources/docs/*.md"' in pyproject and '"resources/docs/images/*.png"' in pyproject
    spec = (ROOT / "packaging" / "ember-studio.spec").read_text(encoding="utf-8")
    assert '(os.path.join(ROOT, "docs"), os.path.join("app", "resources", "docs"))' in spec

    # Every page has its part of the manual, and each anchor is a heading of that file.
    assert set(PAGE_DOCS) == set(PAGE_KEYS)
    for key in PAGE_KEYS:
        name, _, anchor = page_doc(key).partition("#")
        assert (folder / name).is_file(), f"{key}: no {name}"
        assert not anchor or anchor in headings(folder / name), f"{key}: no heading #{anchor} in {name}"


def test_missing_manual_says_where_it_looked(qtbot, tmp_path, monkeypatch):
    from app.widgets.help_viewer import HelpViewer

    monkeypatch.setattr(manual, "DOC_DIRS", (tmp_path / "a", tmp_path / "b"))
    assert manual.docs_dir() is None
    monkeypatch.setattr("app.widgets.help_viewer.docs_dir", manual.docs_dir)
    viewer = HelpViewer()
    qtbot.addWidget(viewer)
    assert "not installed" in viewer.browser.toPlainText() and str(tmp_path / "a") in viewer.browser.toPlainText()
    assert not viewer.open_doc("settings.md")
    assert "not installed" in viewer.note_label.text()


def test_heading_anchors_are_githubs():
    assert heading_slug("Choosing: Compare › Variants") == "choosing-compare--variants"
    assert heading_slug("`evaluation.json`") == "evaluationjson"
    assert heading_slug("Module layout (engine/compress, engine/evaluate)") == \
        "module-layout-enginecompress-engineevaluate"
    taken: dict[str, int] = {}
    assert [heading_slug("Limits", taken) for _ in range(3)] == ["limits", "limits-1", "limits-2"]


# -- the viewer ------------------------------------------------------------------------------

def test_viewer_follows_relative_links_anchors_and_history(qtbot, make_window):
    window = make_window(start=False, page="welcome")
    viewer = app_help.open_doc(window, "first-run.md")
    qtbot.waitUntil(viewer.isVisible, timeout=3000)
    browser = viewer.browser
    assert viewer.current_doc() == "first-run.md" and viewer.contents.currentItem().text() == "Your first run"

    # Click the link "settings.md#what-you-can-set" where it is drawn.
    found = browser.document().find("settings.md")
    assert not found.isNull()
    cursor = QTextCursor(found)
    cursor.setPosition(found.selectionStart() + 2)
    assert cursor.charFormat().anchorHref() == "settings.md#what-you-can-set"
    browser.setTextCursor(cursor)
    browser.ensureCursorVisible()
    spot = browser.cursorRect(cursor).center()
    assert browser.anchorAt(spot) == "settings.md#what-you-can-set"
    QTest.mouseClick(browser.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, spot)
    qtbot.waitUntil(lambda: viewer.current_doc() == "settings.md#what-you-can-set", timeout=3000)
    assert viewer.contents.currentItem().text() == "Preferences"
    assert scrolled_to(browser, "what-you-can-set")

    # An anchor further down lands on it too; Back and Forward walk the history.
    viewer.open_doc("troubleshooting.md#the-engine")
    assert browser.verticalScrollBar().value() > 0 and 0 <= heading_top(browser, "the-engine") < 40
    assert viewer.back_button.isEnabled()
    viewer.back_button.click()
    assert viewer.current_doc() == "settings.md#what-you-can-set"
    viewer.forward_button.click()
    assert viewer.current_doc() == "troubleshooting.md#the-engine"

    # The contents list opens a doc; a link to what did not ship says so instead of doing nothing.
    viewer.contents.setCurrentRow([viewer.contents.item(i).text()
                                   for i in range(viewer.contents.count())].index("Export and deployment"))
    assert viewer.current_doc() == "export.md"
    browser.follow(QUrl("no-such-doc.md"))
    assert viewer.current_doc() == "export.md" and viewer.note_label.isVisible()
    assert "no-such-doc.md is not part of the documentation" in viewer.note_label.text()
    browser.follow(QUrl("first-run.md#welcome"))
    assert viewer.current_doc() == "first-run.md#welcome" and not viewer.note_label.isVisible()

    # Screenshots load, scaled to the text's width.
    image = browser.loadResource(QTextDocument.ResourceType.ImageResource.value, QUrl("images/welcome.png"))
    assert not image.isNull() and image.width() <= browser.viewport().width()


def test_message_links_open_the_manual(qtbot, make_window):
    assert linkify("see docs/custom-models.md.") == \
        'see <a href="help:custom-models.md">docs/custom-models.md</a>.'
    assert linkify("a <b> docs/x.md#y") == 'a &lt;b&gt; <a href="help:x.md#y">docs/x.md#y</a>'

    window = make_window(start=False, page="new_finetune")
    model_step = window.page("new_finetune").model_step
    links = [w for w in model_step.findChildren(type(doc_label(""))) if 'href="help:custom-models.md"' in w.text()]
    assert len(links) == 1, "the Model step's note about your own model code links to its doc"
    links[0].linkActivated.emit("help:custom-models.md")
    assert window.help_viewer.isVisible() and window.help_viewer.current_doc() == "custom-models.md"


# -- the Help menu and F1 --------------------------------------------------------------------

def test_help_menu_and_f1_open_the_right_doc(qtbot, make_window):
    window = make_window(start=False, page="runs")
    menus = [action.text().replace("&", "") for action in window.menuBar().actions()]
    assert menus == ["Engine", "Help"]
    engine_menu = window.menuBar().actions()[0].menu()
    assert [a.text() for a in engine_menu.actions()] == ["Connect to engine…", "Use this machine's engine"]
    menu = window.menuBar().actions()[1].menu()
    names = [action.text() for action in menu.actions() if not action.isSeparator()]
    assert names == ["Documentation", "Help for this page", "Keyboard shortcuts", "Troubleshooting",
                     "About Ember Studio"]
    actions = window.help_actions
    assert actions["Help for this page"].shortcut().toString() == "F1"
    assert actions["Keyboard shortcuts"].shortcut().toString() == "Ctrl+/"

    actions["Documentation"].trigger()
    viewer = window.help_viewer
    assert viewer.isVisible() and viewer.current_doc() == "first-run.md"
    actions["Troubleshooting"].trigger()
    assert viewer.current_doc() == "troubleshooting.md"
    actions["Keyboard shortcuts"].trigger()
    assert window.shortcuts_dialog.isVisible()
    window.shortcuts_dialog.close()

    # F1 on every page: that page's part of the manual, scrolled to its heading.
    for entry in PAGES:
        window.show_page(entry.key)
        actions["Help for this page"].trigger()
        assert viewer.current_doc() == page_doc(entry.key), entry.key
        name, _, anchor = page_doc(entry.key).partition("#")
        if anchor:
            assert scrolled_to(viewer.browser, anchor), entry.key
    # ... and as a key press in the window.
    viewer.close()
    window.show_page("export")
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    QTest.keyClick(window, Qt.Key.Key_F1)
    assert viewer.isVisible() and viewer.current_doc() == "export.md"


def test_about_shows_versions_and_the_data_folder(qtbot, make_window, gui_home):
    from engine import __version__

    window = make_window(start=True, page="welcome")
    wait_connected(qtbot, window)
    window.help_actions["About Ember Studio"].trigger()
    about = window.about_dialog
    assert about.isVisible()
    assert about.value("Ember Studio") == __version__
    assert about.value("Python").startswith(platform.python_version())
    assert about.value("Qt") == qVersion()
    assert about.value("pyqtgraph") == metadata.version("pyqtgraph")
    qtbot.waitUntil(lambda: about.value("Engine").startswith(f"{__version__} (process "), timeout=10_000)
    # Until the engine has probed the machine, its packages are read from their metadata ...
    assert f"torch {metadata.version('torch')}" in about.value("Engine packages")
    # ... then the probe's list is shown.
    about._on_probe({"result": {"packages": {"torch": "9.9.9", "tensorrt": None}}})
    assert "torch 9.9.9" in about.value("Engine packages") and "machine probe" in about.value("Engine packages")

    assert about.data_folder.text() == str(gui_home.home)
    about.copy_button.click()
    assert QGuiApplication.clipboard().text() == str(gui_home.home)
    copy_all = next(b for b in about.findChildren(type(about.copy_button)) if b.text() == "Copy all")
    copy_all.click()
    copied = QGuiApplication.clipboard().text()
    assert f"Qt: {qVersion()}" in copied and f"Data folder: {gui_home.home}" in copied


def test_about_never_imports_torch():
    code = ("import sys; from app.widgets import about_dialog as a; a.window_versions(); "
            "a.local_engine_packages(); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# -- the tour --------------------------------------------------------------------------------

def item_rect(window, key: str) -> QRect:
    sidebar = window.sidebar
    rect = sidebar.visualItemRect(sidebar.item(PAGE_KEYS.index(key)))
    return QRect(sidebar.viewport().mapTo(window, rect.topLeft()), rect.size())


def welcome_cards(window) -> list[QRect]:
    page = window.page("welcome")
    cards = [button.parentWidget() for button in
             (page.builtin_button, page.chat_button, page.own_data_button, page.open_run_button)]
    return [QRect(card.mapTo(window, QPoint(0, 0)), card.size()) for card in cards]


@pytest.mark.parametrize("height", [760, 700])
def test_tour_outlines_what_it_talks_about_and_covers_nothing_of_it(qtbot, make_window, height):
    from app.widgets.tour import tour_for

    window = make_window(start=False, page="runs")
    window.resize(1100 if height == 760 else 1024, height)
    # The connection banner is up when the tour starts on a first run, and goes once the engine
    # answers: the outline must follow the sidebar when it moves.
    window.banner.show()
    tour = tour_for(window)
    tour.start()
    assert [step.page for step in tour.steps][-5:] == ["playground", "export", "models", "hosts", "settings"]
    assert item_rect(window, "welcome").intersects(tour.highlight.geometry())
    before = item_rect(window, "welcome")
    window.banner.hide()
    qtbot.waitUntil(lambda: item_rect(window, "welcome") != before, timeout=3000)  # the sidebar moved up

    for index, step in enumerate(tour.steps):
        assert tour.step_index == index and current_key(window) == step.page
        # Once the layout has settled (the page just opened), the outline is on the step's item.
        qtbot.waitUntil(lambda key=step.page: tour.highlight.geometry().contains(item_rect(window, key)),
                        timeout=3000)
        outline, bubble = tour.highlight.geometry(), tour.bubble.geometry()
        for other in PAGE_KEYS:
            if other != step.page:
                assert not outline.contains(item_rect(window, other).center()), f"{step.page} outlines {other}"
        assert not bubble.intersects(outline), step.page
        assert window.rect().contains(bubble), step.page  # all of it on screen
        if step.page == "welcome":
            for card in welcome_cards(window):
                assert not bubble.intersects(card), "the bubble covers a Welcome card"
        # Nor what the step names on its page; nor, in a window of 760 px or more, any button of the page.
        assert not any(bubble.intersects(rect) for rect in tour.keep_clear_rects(named_only=True)), step.page
        page = window.page(step.page)
        for button in page.findChildren(QAbstractButton) if height >= 760 else ():
            if button.isVisible() and button.window() is window:
                rect = QRect(button.mapTo(window, QPoint(0, 0)), button.size())
                assert not bubble.intersects(rect), f"{step.page}: the bubble covers {button.text()!r}"
        if step.page == "hosts":
            assert "SSH" in tour.bubble.text.text()
        tour.next()
    assert not tour.active
