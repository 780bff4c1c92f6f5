"""`ember` / `python -m app`: open the GUI, or hand a headless command to the engine CLI.

    ember                        open Ember Studio (starts the engine if needed)
    ember --version              print the version
    ember jobs list | run F | …  headless commands, see `ember jobs --help`
    ember --measure-startup      print EMBER_FIRST_PAINT <time> when the window first paints
    ember install-desktop-entry  add the menu entry and icon (--uninstall, --prefix DIR)

Startup time is a feature: only the Qt modules the first window needs are
imported here; pages import anything heavier when they are first shown.
"""

from __future__ import annotations

import argparse
import sys

# First words that belong to the headless CLI (engine/cli/main.py) rather than the GUI.
# tests/app/test_gui_startup.py checks this against engine.cli.main's parser, so a new command is not missed.
CLI_COMMANDS = frozenset({"engine", "run", "jobs", "logs", "stop", "cancel", "resume", "hosts", "export", "queue",
                          "audit", "lineage", "models", "hub", "chat", "chats", "predict", "evaluate",
                          "serve", "bench-serve", "pii", "users", "projects", "secrets"})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "install-desktop-entry":
        from app.desktop.desktop_entry import main as desktop_entry_main

        return desktop_entry_main(argv[1:])
    if argv and argv[0] in CLI_COMMANDS:
        from engine.cli import main as cli

        return int(cli.main(argv) or 0)
    args, qt_args = _parse(argv)
    if args.version:
        import engine

        print(f"ember-studio {engine.__version__}")
        return 0
    return run_gui(args.page, args.measure_startup, args.exit_after_paint, qt_args)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(
        prog="ember", description="Ember Studio: fine-tune, compress and deploy PyTorch models.",
        epilog="Headless commands: ember engine|jobs|run|logs|stop|cancel ... (ember jobs --help).")
    ap.add_argument("--version", action="store_true", help="print the version and exit")
    ap.add_argument("--page", default=None, metavar="PAGE",
                    help="page to open on: welcome, runs, new_finetune, monitor, compress, compare, "
                         "export, hosts, settings (default: the page open when Ember Studio last closed)")
    ap.add_argument("--measure-startup", action="store_true",
                    help="print 'EMBER_FIRST_PAINT <unix time> torch_loaded=<bool>' at first paint")
    ap.add_argument("--exit-after-paint", action="store_true",
                    help="with --measure-startup: quit right after the first paint")
    return ap.parse_known_args(argv)  # the rest (-style, -platform, ...) is Qt's


def run_gui(page: str | None = None, measure_startup: bool = False, exit_after_paint: bool = False,
            qt_args: list[str] | None = None) -> int:
    from app.desktop.display_check import ensure_display

    # Before anything loads Qt's display plugin: choose X11 or Wayland, and install (or name) the
    # system libraries the plugin needs, which Qt would otherwise report one at a time.
    stop = ensure_display(qt_args or [])
    if stop is not None:
        return stop
    import logging

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.models.pages import PAGE_KEYS
    from app.state.style import apply_stylesheet, icon

    if page is not None and page not in PAGE_KEYS:
        print(f"ember: no page {page!r}; choose one of {', '.join(PAGE_KEYS)}", file=sys.stderr)
        return 2

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if QApplication.instance() is None:
        # Fractional scales (1.25, 1.5) as the desktop sets them, not rounded: text and SVG icons stay sharp.
        from PySide6.QtCore import Qt
        from PySide6.QtGui import QGuiApplication

        QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    qapp = QApplication.instance() or QApplication(["ember", *(qt_args or [])])
    qapp.setApplicationName("Ember Studio")
    qapp.setWindowIcon(icon("ember"))
    apply_stylesheet(qapp)  # in the theme of the preferences (light, dark or the system's)
    window = MainWindow()
    from app.state.prefs import restore_window

    restore_window(window, page)  # geometry, and `page` or else the last page (else welcome)
    from app.state.notifications import excepthook

    # An exception in a Qt handler: logged, and an entry with the traceback under the bell; the app goes on.
    sys.excepthook = excepthook(window.notifications)
    if measure_startup:
        from app.desktop.startup import FirstPaintReporter

        window.installEventFilter(FirstPaintReporter(exit_after_paint, window))
    window.show()
    if not exit_after_paint:  # a startup measurement must not open the tour
        from app.widgets.tour import start_first_run_tour

        start_first_run_tour(window)  # the very first run only (prefs "tour_done")
    # Connect (or start the engine) once the event loop runs, so the window paints first.
    QTimer.singleShot(0, window.engine.start)
    return qapp.exec()


if __name__ == "__main__":
    sys.exit(main())
