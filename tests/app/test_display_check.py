"""The check before Qt starts: platform choice, ldd parsing, and installing or naming the packages."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from app.desktop import display_check
from app.desktop.display_check import (
    Choice,
    choose_platform,
    ensure_display,
    missing_libraries,
    packages_for,
)

DATA = Path(__file__).resolve().parent.parent / "data"
# Recorded with `ldd libqxcb.so` on Debian 12: with its default libraries (two missing), and after
# removing the xcb helpers a stock desktop often lacks as well (seven missing).
LDD_DEBIAN12 = (DATA / "ldd_libqxcb_debian12.txt").read_text()
LDD_BARE = (DATA / "ldd_libqxcb_bare.txt").read_text()
LDD_OK = "\n".join(line for line in LDD_DEBIAN12.splitlines() if "not found" not in line)
BARE_PACKAGES = ["libxkbcommon-x11-0", "libxcb-cursor0", "libxcb-icccm4", "libxcb-util1", "libxcb-image0",
                 "libxcb-keysyms1", "libxcb-render-util0"]


def test_the_recorded_ldd_outputs_give_every_missing_package():
    assert missing_libraries(LDD_DEBIAN12) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert packages_for(missing_libraries(LDD_DEBIAN12)) == (["libxcb-icccm4", "libxcb-keysyms1"], [])
    assert packages_for(missing_libraries(LDD_BARE)) == (BARE_PACKAGES, [])
    assert missing_libraries(LDD_OK) == []


def test_an_unknown_library_is_named_with_its_ldd_line():
    packages, unknown = packages_for(["libxcb-icccm.so.4", "libfoo.so.3", "libgthread-2.0.so.0",
                                      "libglib-2.0.so.0"])
    assert packages == ["libxcb-icccm4", "libglib2.0-0"]  # one package for both glib libraries
    assert unknown == ["libfoo.so.3"]


@pytest.mark.parametrize(("env", "qt_args", "expected"), [
    ({"DISPLAY": ":0"}, [], Choice(check="xcb")),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, [], Choice(platform="wayland", check="wayland", fallback="xcb")),
    ({"WAYLAND_DISPLAY": "wayland-0"}, [], Choice(platform="wayland", check="wayland")),
    ({"QT_QPA_PLATFORM": "offscreen"}, [], Choice()),  # the user's choice, no display needed
    ({"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "wayland-0"}, [], Choice(check="xcb")),
    ({"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":0"}, [], Choice(check="wayland")),
    ({"DISPLAY": ":0"}, ["-platform", "offscreen"], Choice()),  # Qt's own argument wins over the environment
])
def test_the_platform_follows_the_session_and_the_users_choice(env, qt_args, expected):
    assert choose_platform(env, qt_args, {"xcb", "wayland"}) == expected


def test_no_display_says_so():
    choice = choose_platform({}, [], {"xcb", "wayland"})
    assert "there is no display (neither DISPLAY nor WAYLAND_DISPLAY is set)" in choice.problem
    assert "QT_QPA_PLATFORM=offscreen" in choice.problem
    no_plugin = choose_platform({"WAYLAND_DISPLAY": "wayland-0"}, [], {"xcb"})
    assert "no Wayland plugin" in no_plugin.problem


class FakeSystem:
    """Stands in for subprocess.run: ldd answers from a recording; sudo and apt-get are recorded, never run."""

    def __init__(self, ldd: dict[str, str], sudo_ok: bool = False, after_install: dict[str, str] | None = None,
                 apt_error: str = ""):
        self.ldd, self.sudo_ok, self.after_install, self.apt_error = ldd, sudo_ok, after_install, apt_error
        self.calls: list[list[str]] = []

    def __call__(self, cmd, **kwargs):
        self.calls.append(list(cmd))
        if cmd[0] == "ldd":
            return subprocess.CompletedProcess(cmd, 0, self.ldd[Path(cmd[1]).name], "")
        if cmd[:3] == ["sudo", "-n", "true"]:
            return subprocess.CompletedProcess(cmd, 0 if self.sudo_ok else 1, "", "sudo: a password is required")
        if "install" in cmd and self.apt_error:
            return subprocess.CompletedProcess(cmd, 100, "Reading package lists...\n", self.apt_error)
        if "install" in cmd and self.after_install is not None:
            self.ldd = self.after_install
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def ran(self, word: str) -> bool:
        return any(word in cmd for cmd in self.calls)


@pytest.fixture
def system(monkeypatch, tmp_path):
    """A PySide6 platforms folder with both plugins, ldd, apt-get and sudo present, not root."""
    (tmp_path / "libqxcb.so").write_bytes(b"")
    (tmp_path / "libqwayland.so").write_bytes(b"")
    monkeypatch.setattr(display_check, "platforms_dir", lambda: tmp_path)
    monkeypatch.setattr(display_check, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(display_check, "is_root", lambda: False)
    monkeypatch.setattr(display_check.sys, "platform", "linux")
    return monkeypatch


def check(env, fake):
    out = io.StringIO()
    code = ensure_display([], env, run=fake, out=out)
    return code, out.getvalue()


def test_without_root_or_sudo_it_prints_the_one_install_line_and_stops(system):
    fake = FakeSystem({"libqxcb.so": LDD_BARE})
    code, text = check({"DISPLAY": ":99"}, fake)
    assert code == 1
    assert f"  sudo apt-get install -y {' '.join(BARE_PACKAGES)}\n" in text
    assert text.count("apt-get install") == 1
    assert "Qt's X11 display plugin (xcb) needs libraries that are not installed: libxkbcommon-x11.so.0, " in text
    assert not fake.ran("apt-get")  # nothing installed without the right to


def test_as_root_it_installs_the_packages_and_goes_on(system):
    system.setattr(display_check, "is_root", lambda: True)
    fake = FakeSystem({"libqxcb.so": LDD_DEBIAN12}, after_install={"libqxcb.so": LDD_OK})
    env = {"DISPLAY": ":99"}
    code, text = check(env, fake)
    assert code is None, text
    install = next(cmd for cmd in fake.calls if "install" in cmd)
    assert install[-2:] == ["libxcb-icccm4", "libxcb-keysyms1"] and install[0] == "env"
    assert [cmd[0] for cmd in fake.calls].count("ldd") == 2  # checked again after installing
    assert "installed; opening the window" in text
    assert "QT_QPA_PLATFORM" not in env  # X11: Qt's own default


def test_with_passwordless_sudo_it_installs_through_sudo(system):
    fake = FakeSystem({"libqxcb.so": LDD_DEBIAN12}, sudo_ok=True, after_install={"libqxcb.so": LDD_OK})
    code, _ = check({"DISPLAY": ":99"}, fake)
    assert code is None
    install = next(cmd for cmd in fake.calls if "install" in cmd)
    assert install[:3] == ["sudo", "-n", "env"]


def test_a_failed_install_still_prints_the_line(system):
    system.setattr(display_check, "is_root", lambda: True)
    fake = FakeSystem({"libqxcb.so": LDD_DEBIAN12})  # apt-get "succeeds" but nothing changes
    code, text = check({"DISPLAY": ":99"}, fake)
    assert code == 1
    assert "still missing after apt-get: libxcb-icccm.so.4, libxcb-keysyms.so.1" in text
    assert "  apt-get install -y libxcb-icccm4 libxcb-keysyms1\n" in text  # root: no sudo


def test_apt_gets_error_is_shown(system):
    system.setattr(display_check, "is_root", lambda: True)
    fake = FakeSystem({"libqxcb.so": LDD_DEBIAN12}, apt_error="E: Unable to locate package libxcb-icccm4\n")
    code, text = check({"DISPLAY": ":99"}, fake)
    assert code == 1
    assert "exit status 100" in text and "E: Unable to locate package libxcb-icccm4" in text
    assert text.rstrip().endswith("apt-get install -y libxcb-icccm4 libxcb-keysyms1")


def test_an_unknown_library_is_reported_with_the_ldd_line(system):
    fake = FakeSystem({"libqxcb.so": LDD_OK + "\n\tlibfoo.so.3 => not found\n"})
    code, text = check({"DISPLAY": ":99"}, fake)
    assert code == 1
    assert "no known Debian/Ubuntu package provides libfoo.so.3 (ldd: 'libfoo.so.3 => not found')" in text
    assert "apt-get install" not in text


def test_nothing_missing_costs_one_ldd_call(system):
    fake = FakeSystem({"libqxcb.so": LDD_OK})
    assert check({"DISPLAY": ":99"}, fake) == (None, "")
    assert fake.calls == [["ldd", str(display_check.platforms_dir() / "libqxcb.so")]]


def test_wayland_is_used_on_a_wayland_session_and_x11_when_wayland_cannot_load(system):
    wayland_missing = "\tlibwayland-cursor.so.0 => not found\n"
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    assert check(env, FakeSystem({"libqwayland.so": LDD_OK, "libqxcb.so": LDD_BARE}))[0] is None
    assert env["QT_QPA_PLATFORM"] == "wayland"
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    assert check(env, FakeSystem({"libqwayland.so": wayland_missing, "libqxcb.so": LDD_OK}))[0] is None
    assert env["QT_QPA_PLATFORM"] == "xcb"  # XWayland
    code, text = check({"WAYLAND_DISPLAY": "wayland-0"}, FakeSystem({"libqwayland.so": wayland_missing}))
    assert code == 1 and "  sudo apt-get install -y libwayland-cursor0\n" in text


def test_offscreen_and_no_display(system):
    fake = FakeSystem({})
    assert check({"QT_QPA_PLATFORM": "offscreen"}, fake) == (None, "")
    assert fake.calls == []
    code, text = check({}, fake)
    assert code == 1 and "there is no display" in text


def test_the_packaged_app_checks_the_plugin_inside_its_bundle(monkeypatch, tmp_path):
    platforms = tmp_path / "PySide6" / "Qt" / "plugins" / "platforms"
    platforms.mkdir(parents=True)
    monkeypatch.setattr(display_check.sys, "frozen", True, raising=False)
    monkeypatch.setattr(display_check.sys, "_MEIPASS", str(tmp_path), raising=False)
    assert display_check.platforms_dir() == platforms
    seen = {}

    def fake_run(cmd, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, LDD_OK, "")

    monkeypatch.setattr(display_check, "which", lambda name: f"/usr/bin/{name}")
    display_check.run_ldd(platforms / "libqxcb.so", fake_run)
    assert seen["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path)  # the bundle's libraries, as the app loads them


def test_the_real_plugin_is_found():
    folder = display_check.platforms_dir()
    assert folder is not None and (folder / "libqxcb.so").is_file()
