"""Packaging: `ember install-desktop-entry`, and the frozen binary's stand-in for the Python interpreter.

The dispatch tests run packaging/ember_entry.py with the normal interpreter, which exercises exactly the
argument handling the PyInstaller binary uses (engine/launch/frozen.py). The build itself is checked by
packaging/smoke.sh; test_packaged_build_smoke runs it when a build exists (packaging/build.sh).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from engine.launch.frozen import parse

ROOT = Path(__file__).resolve().parent.parent
ENTRY = ROOT / "packaging" / "ember_entry.py"
EMBER = Path(sys.executable).parent / "ember"  # the launcher pip wrote into the venv
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def entry(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ENTRY), *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or ROOT, env=ENV)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


# ---- desktop entry

@pytest.mark.skipif(not EMBER.is_file(), reason="the `ember` launcher is not installed in this environment")
def test_install_desktop_entry_writes_the_entry_and_icons_then_uninstall_removes_them(tmp_path):
    prefix = tmp_path / "share"
    out = subprocess.run([str(EMBER), "install-desktop-entry", "--prefix", str(prefix)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    desktop = prefix / "applications" / "ember-studio.desktop"
    text = desktop.read_text()
    lines = text.splitlines()
    assert lines[0] == "[Desktop Entry]"
    assert f"Exec={EMBER}" in lines  # absolute: desktop launchers do not search the shell's PATH
    assert "Icon=ember-studio" in lines and "Type=Application" in lines
    assert "Categories=Development;Science;" in lines
    for size in (48, 128, 256):
        icon = prefix / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "ember-studio.png"
        assert png_size(icon) == (size, size)
        assert str(icon) in out.stdout  # it says what it wrote
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(["desktop-file-validate", str(desktop)], capture_output=True, text=True)
        assert check.returncode == 0 and "error" not in check.stdout.lower(), check.stdout

    out = subprocess.run([str(EMBER), "install-desktop-entry", "--uninstall", "--prefix", str(prefix)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert not desktop.exists()
    assert not list((prefix / "icons").rglob("*.png"))
    again = subprocess.run([str(EMBER), "install-desktop-entry", "--uninstall", "--prefix", str(prefix)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to remove" in again.stdout


def test_exec_line_quotes_a_launcher_path_with_spaces(tmp_path):
    from app.desktop.desktop_entry import _quote, entry_text

    command = _quote("/opt/My Apps/ember")
    assert command == '"/opt/My Apps/ember"'
    lines = entry_text(command).splitlines()
    assert 'Exec="/opt/My Apps/ember"' in lines and 'TryExec="/opt/My Apps/ember"' in lines


def test_unwritable_prefix_is_reported_not_raised(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = entry("install-desktop-entry", "--prefix", str(blocker))
    assert out.returncode == 1
    assert "could not write the desktop entry" in out.stderr and "--prefix" in out.stderr


def test_packaging_desktop_file_names_the_icon_the_installer_writes():
    lines = (ROOT / "packaging" / "ember-studio.desktop").read_text().splitlines()
    assert {"Type=Application", "Exec=ember", "Icon=ember-studio", "Categories=Development;Science;"} <= set(lines)


# ---- the frozen interpreter's command lines

def test_parse_tells_interpreter_command_lines_from_app_ones():
    assert parse(["-m", "engine", "serve"]) == ("module", "engine", ["serve"], set())
    assert parse(["-u", "-m", "engine.recipes.finetune", "--run-dir", "d"]) == \
        ("module", "engine.recipes.finetune", ["--run-dir", "d"], {"u"})
    assert parse(["-I", "-c", "print(1)", "x"]) == ("code", "print(1)", ["x"], {"I"})
    assert parse(["-uB", "-X", "utf8", "-mpkg"]) == ("module", "pkg", [], {"u", "B", "X"})
    # App command lines, Qt's single-dash options included, are left to the app.
    for argv in ([], ["--version"], ["engine", "start"], ["--page", "runs"], ["-platform", "offscreen"],
                 ["install-desktop-entry", "--prefix", "/x"], ["run", "job.yaml"]):
        assert parse(argv) is None, argv


def test_dash_m_runs_a_module_as_main_with_its_arguments(tmp_path):
    (tmp_path / "probe_mod.py").write_text(
        "import sys\nprint(__name__, sys.argv[0].endswith('probe_mod.py'), sys.argv[1:])\n"
        "print('write_through', sys.stdout.write_through)\n")
    out = entry("-u", "-m", "probe_mod", "a", "--b", cwd=tmp_path)  # torchrun's worker form
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["__main__ True ['a', '--b']", "write_through True"]


def test_dash_m_runs_the_engine_cli_and_keeps_its_exit_status():
    out = entry("-m", "engine", "--version")
    assert out.returncode == 0 and out.stdout.startswith("ember-studio "), out.stderr
    out = entry("-m", "engine", "no-such-command")
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_dash_c_runs_code_with_argv_and_exit_status():
    out = entry("-I", "-c", "import sys; print(sys.argv); sys.exit(7)", "x", "y")
    assert out.returncode == 7
    assert out.stdout.strip() == "['-c', 'x', 'y']"
    out = entry("-c", "raise ValueError('boom')")
    assert out.returncode == 1 and "ValueError: boom" in out.stderr


def test_interpreter_usage_errors_say_what_to_do():
    out = entry("-m")
    assert out.returncode == 2 and "Argument expected for the -m option" in out.stderr
    out = entry("-u")
    assert out.returncode == 2 and "use -m MODULE or -c CODE" in out.stderr


def test_anything_else_goes_to_the_app():
    out = entry("--version")
    assert out.returncode == 0 and out.stdout.startswith("ember-studio ")


# ---- the real build (packaging/build.sh first)

@pytest.mark.slow
@pytest.mark.packaging
@pytest.mark.skipif(not (ROOT / "dist" / "ember-studio" / "ember").is_file(),
                    reason="no build: run packaging/build.sh (packaging/ci.sh builds and runs the smoke)")
def test_packaged_build_smoke():
    out = subprocess.run(["bash", str(ROOT / "packaging" / "smoke.sh")], capture_output=True, text=True,
                         timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "smoke: all passed" in out.stdout
