"""Preferences: typed round trips, migration from the unversioned layout, bad values, and their effects."""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import pytest
from PySide6.QtWidgets import QApplication, QMainWindow

from app.connection.engine_process import EngineProcess
from app.state import prefs as prefs_mod
from app.state import style
from app.state.prefs import KEYS, PREFS_VERSION, prefs, reset_prefs, restore_window, save_window
from app.text import format as fmt
from engine.api import paths as paths_mod

VALUES = {
    "data_dir": "/srv/ember data",
    "theme": "dark",
    "default_device": "cpu",
    "units": "decimal",
    "last_page": "hosts",
    "tour_done": True,
    "desktop_notifications": False,
    "remote_engine": "gpu-server:7443",
}


def settings_file():
    return os.environ["EMBER_SETTINGS_FILE"]


def test_every_key_round_trips_through_the_file():
    assert set(VALUES) == set(KEYS)
    p = prefs()
    assert {k: p.get(k) for k in KEYS} == {k: spec.default for k, spec in KEYS.items()}
    seen = []
    p.changed.connect(seen.append)
    for key, value in VALUES.items():
        p.set(key, value)
    assert seen == list(VALUES)
    reset_prefs()  # read back from the INI file, not from memory
    again = prefs()
    assert again is not p
    assert {k: again.get(k) for k in KEYS} == VALUES
    assert int(again.settings.value("version")) == PREFS_VERSION


def test_setting_a_value_of_the_wrong_kind_is_refused():
    with pytest.raises(ValueError):
        prefs().set("theme", "purple")
    with pytest.raises(KeyError):
        prefs().get("no_such_key")


def test_an_unversioned_v0_file_is_migrated(tmp_path):
    path = tmp_path / "settings.ini"
    path.write_text("[General]\nhome=/data/old-ember\ndark_mode=true\npage=compare\nunits=decimal\n")
    p = prefs()
    assert p.get("data_dir") == "/data/old-ember"
    assert p.get("theme") == "dark"
    assert p.get("last_page") == "compare"
    assert p.get("units") == "decimal"  # a key that kept its name stays
    text = path.read_text()
    assert "dark_mode" not in text and "home=" not in text and f"version={PREFS_VERSION}" in text
    reset_prefs()  # a second start finds the new layout and changes nothing
    assert prefs().get("theme") == "dark"


def test_garbage_values_fall_back_to_the_defaults_with_a_warning(tmp_path, caplog):
    (tmp_path / "settings.ini").write_text(
        f"[General]\nversion={PREFS_VERSION}\ntheme=plaid\ntour_done=maybe\nunits=1, 2\n"
        "desktop_notifications=off\n")
    caplog.set_level(logging.WARNING, logger="app.state.prefs")
    p = prefs()
    assert p.get("theme") == "system"
    assert p.get("tour_done") is False
    assert p.get("units") == "binary"
    assert p.get("desktop_notifications") is False  # "off" is a readable no
    warned = " ".join(r.getMessage() for r in caplog.records)
    for key in ("theme", "tour_done", "units"):
        assert f"{key} is unreadable" in warned


def test_an_unreadable_version_migrates_from_the_start(tmp_path):
    (tmp_path / "settings.ini").write_text("[General]\nversion=two\nhome=/x\n")
    assert prefs().get("data_dir") == "/x"


def test_units_preference_changes_sizes():
    assert fmt.size(25_276_510_208) == "23.5 GiB"
    prefs().set("units", "decimal")
    assert fmt.size(25_276_510_208) == "25.3 GB"
    assert fmt.size(999) == "999 B"
    assert fmt.size(1_500_000, units="binary") == "1.4 MiB"


def test_geometry_and_last_page_come_back_in_a_new_window(make_window, qtbot):
    first = make_window(start=False, page="compare")
    # Maximized: the offscreen screen (800x800) is smaller than the window, so a plain size
    # would come back clamped; the maximized state is part of the geometry and comes back whole.
    first.showMaximized()
    qtbot.waitUntil(first.isMaximized)
    first.close()  # closeEvent saves
    assert prefs().get("last_page") == "compare"
    assert prefs().window_geometry(prefs_mod.window_home(first))  # kept for this data folder
    second = make_window(start=False, page="runs")
    assert not second.isMaximized()
    assert restore_window(second) == "compare"
    assert second.stack.currentWidget() is second.page("compare")
    qtbot.waitUntil(second.isMaximized, timeout=3000)
    assert restore_window(second, "hosts") == "hosts"  # --page wins over the last page


def test_an_unknown_last_page_opens_the_first_page(make_window):
    prefs().set("last_page", "gone_page")
    window = make_window(start=False, page="hosts")
    shown = restore_window(window)
    assert shown == prefs_mod.default_page()
    assert shown in ("welcome", "runs")


@pytest.fixture
def restore_look(qapp):
    sheet, palette = qapp.styleSheet(), qapp.palette()
    yield qapp
    style.apply_theme(qapp, "light")
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)


def test_theme_combo_restyles_the_app_live(restore_look, make_window, qtbot):
    app = restore_look
    style.apply_theme(app, "light")
    window = make_window(start=False, page="settings")
    card = window.page("settings").preferences
    light_sheet = app.styleSheet()
    card.theme_combo.setCurrentIndex(card.theme_combo.findData("dark"))
    assert prefs().get("theme") == "dark"
    assert style.current_theme() == "dark"
    assert app.styleSheet() != light_sheet
    assert style.theme_tokens("dark")["bg"] in app.styleSheet()
    assert style.theme_tokens("light")["bg"] not in app.styleSheet()
    card.theme_combo.setCurrentIndex(card.theme_combo.findData("light"))
    assert app.styleSheet() == light_sheet


def test_preferences_card_controls_are_labelled_and_saved(make_window):
    window = make_window(start=False, page="settings")
    card = window.page("settings").preferences
    controls = (card.theme_combo, card.data_dir_edit, card.browse_button, card.device_combo, card.units_combo,
                card.notifications_check, card.reset_tour_button)
    for control in controls:
        assert control.toolTip(), control
        assert control.accessibleName() or control.text(), control
    card.units_combo.setCurrentIndex(card.units_combo.findData("decimal"))
    card.device_combo.setCurrentIndex(card.device_combo.findData("cpu"))
    card.notifications_check.setChecked(False)
    card.data_dir_edit.setText("/tmp/elsewhere")
    card.data_dir_edit.editingFinished.emit()
    prefs().set("tour_done", True)
    card.reset_tour_button.click()
    p = prefs()
    assert (p.get("units"), p.get("default_device"), p.get("desktop_notifications"), p.get("data_dir"),
            p.get("tour_done")) == ("decimal", "cpu", False, "/tmp/elsewhere", False)


def test_default_device_is_the_wizards_first_choice(make_window):
    prefs().set("default_device", "cpu")
    window = make_window(start=False, page="new_finetune")
    assert window.page("new_finetune").training_step.device_combo.currentData() == "cpu"
    assert window.page("new_finetune").current_spec()["device"] == "cpu"


@pytest.mark.own_engine  # the window starts this machine's engine in the preferred folder
def test_data_dir_preference_is_the_engines_home(tmp_path, monkeypatch, qtbot):
    from tests.app.conftest import CONNECT_TIMEOUT_MS, stop_engine

    home = tmp_path / "preferred home"
    prefs().set("data_dir", str(home))
    monkeypatch.delenv("EMBER_HOME", raising=False)
    monkeypatch.delenv("EMBER_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("EMBER_SSH_KNOWN_HOSTS", "")
    # What the engine resolves with EMBER_HOME set to that folder (the socket's folder is <home>/run, or a
    # short one under /tmp when that path is too long for a Unix socket).
    with monkeypatch.context() as env:
        env.setenv("EMBER_HOME", str(home))
        expected = paths_mod.resolve()
    engine = EngineProcess()
    engine.start()
    try:
        assert engine.paths.home == home.resolve()
        assert engine.paths.runtime == expected.runtime
        assert "EMBER_HOME" not in os.environ
        qtbot.waitUntil(lambda: engine.state == "connected", timeout=CONNECT_TIMEOUT_MS)
        reply = {}
        engine.client.request("engine.status", {}, reply.update, lambda err: reply.update(error=err))
        qtbot.waitUntil(lambda: bool(reply), timeout=10_000)
        assert reply.get("home") == str(home.resolve())
    finally:
        child = engine._child
        engine.close()
        stop_engine(engine.paths, (child.pid,) if child else ())


def test_ember_home_wins_over_the_preference(gui_home, tmp_path):
    prefs().set("data_dir", str(tmp_path / "ignored"))
    engine = EngineProcess()
    from app.state.prefs import engine_paths_from_prefs

    paths, from_prefs = engine_paths_from_prefs()
    assert paths.home == gui_home.home and not from_prefs
    engine.deleteLater()


def test_apply_stylesheet_uses_the_preferred_theme(restore_look):
    prefs().set("theme", "dark")
    style.apply_stylesheet(QApplication.instance())
    assert style.current_theme() == "dark"


class HomeWindow(QMainWindow):
    """A window on data folder ``home``, as restore_window and save_window see a MainWindow."""

    def __init__(self, home: str):
        super().__init__()
        self.engine = SimpleNamespace(paths=SimpleNamespace(home=home))
        self.sidebar = SimpleNamespace(currentRow=lambda: -1)
        self.shown: list[str] = []

    def show_page(self, key: str) -> None:
        self.shown.append(key)


def test_window_geometry_is_kept_per_data_folder(qtbot):
    first = HomeWindow("/data/ember-a")
    qtbot.addWidget(first)
    first.setGeometry(40, 50, 500, 400)
    first.show()
    save_window(first)
    rect, maximized = prefs_mod.saved_rect(prefs().window_geometry("/data/ember-a"))
    assert (rect.width(), rect.height(), maximized) == (500, 400, False)
    # Another data folder has its own (none yet): a fresh one opens at its default size.
    fresh = HomeWindow("/data/ember-b")
    qtbot.addWidget(fresh)
    fresh.resize(300, 200)
    restore_window(fresh, "runs")
    assert fresh.size().toTuple() == (300, 200) and fresh.shown == ["runs"]
    again = HomeWindow("/data/ember-a")
    qtbot.addWidget(again)
    restore_window(again, "runs")
    assert again.size().toTuple() == (500, 400)


def test_a_geometry_that_does_not_fit_the_screen_is_ignored_silently(qtbot, caplog):
    big = HomeWindow("/data/ember-a")
    qtbot.addWidget(big)
    screen = big.screen().availableGeometry()
    big.setGeometry(0, 0, screen.width() + 400, screen.height() + 200)  # from a bigger screen, say
    big.show()
    save_window(big)
    assert not prefs_mod.fits_a_screen(prefs().window_geometry("/data/ember-a"))
    caplog.set_level(logging.INFO, logger="app.state.prefs")
    window = HomeWindow("/data/ember-a")
    qtbot.addWidget(window)
    window.resize(320, 240)
    restore_window(window, "runs")
    assert window.size().toTuple() == (320, 240)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # Damaged bytes are no geometry either.
    assert prefs_mod.saved_rect(b"\x01\xd9\xd0\xcb\x00\x03\x00\x00,with=binary\n") is None


def test_the_single_window_geometry_of_layout_1_is_dropped(tmp_path):
    (tmp_path / "settings.ini").write_text("[General]\nversion=1\nwindow_geometry=@ByteArray(xyz)\ntheme=dark\n")
    p = prefs()
    assert p.get("theme") == "dark"
    assert "window_geometry" not in (tmp_path / "settings.ini").read_text()
    assert p.window_geometry("/any") == b""
