"""The first-paint probe behind `ember --measure-startup` (read by benchmarks/startup_bench.py)."""

from __future__ import annotations

import sys
import time

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication


class FirstPaintReporter(QObject):
    """Prints `EMBER_FIRST_PAINT <unix time> torch_loaded=<bool>` once, at the first paint."""

    def __init__(self, exit_after: bool, parent: QObject):
        super().__init__(parent)
        self._exit_after = exit_after
        self._done = False

    def eventFilter(self, _watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if not self._done and event.type() == QEvent.Type.Paint:
            self._done = True
            # Report once this paint has been handled, not when it is about to start.
            QTimer.singleShot(0, self._report)
        return False

    def _report(self) -> None:
        sys.stdout.write(f"EMBER_FIRST_PAINT {time.time():.6f} "
                         f"torch_loaded={'torch' in sys.modules}\n")
        sys.stdout.flush()
        if self._exit_after:
            QApplication.quit()
