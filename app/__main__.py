"""`ember` / `python -m app`: open the GUI, or hand a headless command to the engine CLI.

    ember                        open Ember Studio (starts the engine if needed)
    ember --version              print the version
    ember jobs list | run F | …  headless commands, see `ember jobs --help`
    ember --measure-startup      print EMBER_FIRST_PAINT <time> when the window first paints

Startup time is a feature: only the Qt modules the first window needs are
imported here; pages import anything heavier when they are first shown.
"""

from __future__ import annotations

import argparse
import sys

# First words that belong to the headless CLI (engine/cli.py) rather than the GUI.
CLI_COMMANDS = frozenset({"engine", "run", "jobs", "logs", "stop", "cancel", "resume"})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in CLI_COMMANDS:
        from engine import cli

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
    ap.add_argument("--page", default="runs", metavar="PAGE",
                    help="page to open on: runs, new_finetune, monitor, compress, compare, "
                         "export, hosts, settings")
    ap.add_argument("--measure-startup", action="store_true",
                    help="print 'EMBER_FIRST_PAINT <unix time> torch_loaded=<bool>' at first paint")
    ap.add_argument("--exit-after-paint", action="store_true",
                    help="with --measure-startup: quit right after the first paint")
    return ap.parse_known_args(argv)  # the rest (-style, -platform, ...) is Qt's


def run_gui(page: str = "runs", measure_startup: bool = False, exit_after_paint: bool = False,
            qt_args: list[str] | None = None) -> int:
    import logging

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import PAGE_KEYS, MainWindow
    from app.style import apply_stylesheet, icon

    if page not in PAGE_KEYS:
        print(f"ember: no page {page!r}; choose one of {', '.join(PAGE_KEYS)}", file=sys.stderr)
        return 2

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    qapp = QApplication.instance() or QApplication(["ember", *(qt_args or [])])
    qapp.setApplicationName("Ember Studio")
    qapp.setWindowIcon(icon("ember"))
    apply_stylesheet(qapp)
    window = MainWindow()
    window.show_page(page)
    _report_uncaught_errors(window)
    if measure_startup:
        from app.startup import FirstPaintReporter

        window.installEventFilter(FirstPaintReporter(exit_after_paint, window))
    window.show()
    # Connect (or start the engine) once the event loop runs, so the window paints first.
    QTimer.singleShot(0, window.engine.start)
    return qapp.exec()


def _report_uncaught_errors(window) -> None:
    """An exception in a Qt handler is logged and shown in the status bar; the app goes on."""
    import logging

    log = logging.getLogger("app")

    def hook(exc_type, exc, tb) -> None:
        log.error("uncaught error", exc_info=(exc_type, exc, tb))
        window.statusBar().showMessage(
            f"Internal error: {exc_type.__name__}: {exc} (the traceback is in the log)", 15000)

    sys.excepthook = hook


if __name__ == "__main__":
    sys.exit(main())
