"""`ember` entry point: version, hand-over to the engine CLI, and a light, fast start."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.app.conftest import engine_pid


def run_app(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_version(gui_home):
    import engine

    done = run_app("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"ember-studio {engine.__version__}"


def test_engine_commands_are_handed_to_the_engine_cli(gui_home):
    done = run_app("engine", "status")
    assert done.returncode == 1  # engine/cli/main.py: status with no engine running
    assert done.stdout.startswith("stopped:")
    assert engine_pid(gui_home) is None  # `status` never starts an engine


def test_every_headless_command_reaches_the_engine_cli():
    """`ember export …` used to open the GUI: every word engine.cli.main knows must be routed to it."""
    from app.__main__ import CLI_COMMANDS
    from engine.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) <= CLI_COMMANDS, set(sub.choices) - CLI_COMMANDS


def test_queue_command_runs_headless(gui_home):
    done = run_app("queue")
    assert done.returncode == 0, done.stderr
    assert "queued: none" in done.stdout, done.stdout  # the engine CLI's answer, not a window


@pytest.mark.slow
def test_measure_startup_reports_first_paint_without_torch(gui_home):
    done = run_app("--measure-startup", "--exit-after-paint", timeout=90)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("EMBER_FIRST_PAINT ")]
    assert len(lines) == 1, done.stdout
    _, stamp, torch_flag = lines[0].split()
    assert float(stamp) > 0
    assert torch_flag == "torch_loaded=False"


def test_the_first_window_imports_nothing_heavy(gui_home):
    script = textwrap.dedent("""
        import sys
        from PySide6.QtWidgets import QApplication
        from app.main_window import MainWindow
        from app.state.style import apply_stylesheet
        app = QApplication([])
        apply_stylesheet(app)
        window = MainWindow()
        window.show()
        app.processEvents()
        heavy = {"torch", "numpy", "pyqtgraph", "pandas", "PySide6.QtOpenGL", "PySide6.QtQml"}
        print(sorted(heavy & set(sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
