"""A short guided tour: one sidebar page at a time, outlined, with a sentence beside it.

The tour opens each page it talks about (so the newcomer sees it, not just its
name), outlines that page's sidebar item and puts a small bubble next to it with
Back / Next / Skip tour. The outline follows the item when the layout moves it (the
connection banner hiding once the engine answers, a resize), and the bubble sits
where it covers neither the item nor what the step names as its page's main
controls (Welcome's start cards). Esc ends it anywhere in the window. Finishing or
skipping remembers ``tour_done`` in the preferences, so run_gui starts it by
itself only once; the Welcome page's "Take the tour" starts it again at will.
Both overlays are children of the main window, not separate windows, so they
move and close with it and never steal the window manager's focus.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QPoint, QRect, Qt, QTimer
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractButton,
    QFrame,
    QHBoxLayout,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.state.prefs import prefs
from app.state.style import colour, set_role
from app.widgets.common import label

BUBBLE_WIDTH = 340
GAP = 14  # between the outlined item and the bubble


@dataclass(frozen=True)
class TourStep:
    page: str  # the sidebar page this step opens and outlines
    title: str
    text: str  # one or two sentences
    # Attributes of the page naming controls the bubble must not cover (a control in a card keeps
    # its whole card clear).
    keep_clear: tuple[str, ...] = ()


STEPS = (
    TourStep("welcome", "Welcome",
             "Start here: the built-in model trains in a few minutes on a CPU, or bring your own data. "
             "Your latest runs are listed here too.",
             keep_clear=("builtin_button", "own_data_button", "open_run_button", "tour_button")),
    TourStep("new_finetune", "New fine-tune",
             "Six steps from a task to a running job, each with a working default, so Next, Next, Launch "
             "always gives a run."),
    TourStep("monitor", "Monitor",
             "Follow a run's loss, metrics, memory and logs live; it keeps running when you close Ember."),
    TourStep("compress", "Compress",
             "Make a finished model smaller and faster: quantize, prune or distil it, and see what it costs "
             "in accuracy."),
    TourStep("compare", "Compare",
             "Overlay the curves and settings of several runs, and weigh compressed variants against the "
             "original."),
    TourStep("playground", "Playground",
             "Chat with any model (built-in, your fine-tune, a served endpoint) or classify with it; put a tuned "
             "model beside the one it started from, and serve it at a local URL.",
             keep_clear=("side_check", "new_button", "serve_button", "picker_a", "picker_b_box")),
    TourStep("export", "Export",
             "Package a model as ONNX, TorchScript, TensorRT or a Jetson bundle, or a language model as a merged "
             "checkpoint, GGUF or ONNX for generation, each checked against the model before you ship it."),
    TourStep("models", "Models",
             "The built-in models and those downloaded from the Hugging Face Hub: fine-tune, chat with, export or "
             "serve each one from its row.",
             keep_clear=("builtin_table", "finetune_button", "chat_button", "export_button", "serve_button")),
    TourStep("hosts", "Hosts",
             "Add a GPU server or a Jetson over SSH, checked before anything runs, to train a model there "
             "or deploy one to it."),
    TourStep("settings", "Settings",
             "Check what this machine can do and choose the theme, units and data folder."),
)


def mark_tour_done() -> None:
    """Remember that the tour was seen."""
    prefs().set("tour_done", True)


def tour_done() -> bool:
    """Whether the tour was finished or skipped before (an unreadable value reads as not yet)."""
    return bool(prefs().get("tour_done"))


def tour_for(window: QWidget) -> Tour:
    """The window's one tour (made on first use), so two starts never stack two bubbles."""
    found = window.findChild(Tour)
    return found if found is not None else Tour(window)


class TourBubble(QFrame):
    """The small panel beside the outlined item: title, text, 'Step n of m', the buttons."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.setObjectName("tourBubble")
        set_role(self, "card")
        self.setAccessibleName("Guided tour")
        self.setStyleSheet(f"QFrame#tourBubble {{ border: 2px solid {colour('accent')}; border-radius: 8px; }}")
        self.setFixedWidth(BUBBLE_WIDTH)
        box = QVBoxLayout(self)
        box.setContentsMargins(16, 14, 16, 12)
        box.setSpacing(8)
        self.counter = label("", "muted")
        self.title = label("", "h2")
        self.text = label("", "", wrap=True)
        box.addWidget(self.counter)
        box.addWidget(self.title)
        box.addWidget(self.text)
        row = QHBoxLayout()
        self.skip_button = QPushButton("Skip tour")
        self.skip_button.setToolTip("End the tour (Esc); Welcome › Take the tour starts it again")
        self.back_button = QPushButton("Back")
        self.next_button = QPushButton("Next")
        set_role(self.next_button, "primary")
        row.addWidget(self.skip_button)
        row.addStretch(1)
        row.addWidget(self.back_button)
        row.addWidget(self.next_button)
        box.addLayout(row)


class Tour(QObject):
    """Walks ``window`` through STEPS; ``start()``, ``next()``, ``back()``, ``finish()``."""

    def __init__(self, window: QWidget, steps: tuple[TourStep, ...] = STEPS):
        super().__init__(window)
        self.window = window
        from app.models.pages import PAGE_KEYS

        self.steps = [step for step in steps if step.page in PAGE_KEYS]  # only pages the window has
        self.step_index = -1
        self.active = False
        self._start_page: str | None = None

        self.highlight = QFrame(window)
        self.highlight.setObjectName("tourHighlight")
        self.highlight.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.highlight.setStyleSheet(
            f"QFrame#tourHighlight {{ border: 3px solid {colour('accent')}; border-radius: 6px; background: transparent; }}")
        self.highlight.hide()
        self.bubble = TourBubble(window)
        self.bubble.hide()
        self.bubble.next_button.clicked.connect(self.next)
        self.bubble.back_button.clicked.connect(self.back)
        self.bubble.skip_button.clicked.connect(self.finish)
        self._escape = QShortcut(QKeySequence(Qt.Key.Key_Escape), window)
        self._escape.setContext(Qt.ShortcutContext.WindowShortcut)
        self._escape.setEnabled(False)
        self._escape.activated.connect(self.finish)
        window.installEventFilter(self)  # follow the window when it is resized
        # ... and the sidebar when the layout moves it (the connection banner showing or hiding).
        window.sidebar.installEventFilter(self)
        window.stack.installEventFilter(self)

    # -- walking -------------------------------------------------------------------------

    def start(self) -> None:
        """Open the first step (again, when the tour was run before)."""
        if not self.steps or self.active:
            return
        self._start_page = self._current_page()
        self.active = True
        self._escape.setEnabled(True)
        self._show(0)

    def next(self) -> None:
        if self.step_index >= len(self.steps) - 1:
            self.finish()
        else:
            self._show(self.step_index + 1)

    def back(self) -> None:
        if self.step_index > 0:
            self._show(self.step_index - 1)

    def finish(self) -> None:
        """End the tour (last Next, Skip tour or Esc), remember it, and return to where it began."""
        if not self.active:
            return
        self.active = False
        self._escape.setEnabled(False)
        self.bubble.hide()
        self.highlight.hide()
        mark_tour_done()
        if self._start_page:
            self.window.show_page(self._start_page)

    def current(self) -> TourStep | None:
        return self.steps[self.step_index] if 0 <= self.step_index < len(self.steps) else None

    # -- drawing -------------------------------------------------------------------------

    def _current_page(self) -> str | None:
        from app.models.pages import PAGES

        row = self.window.sidebar.currentRow()
        return PAGES[row].key if 0 <= row < len(PAGES) else None

    def _show(self, index: int) -> None:
        self.step_index = index
        step = self.steps[index]
        self.window.show_page(step.page)
        bubble = self.bubble
        bubble.counter.setText(f"Step {index + 1} of {len(self.steps)}")
        bubble.title.setText(step.title)
        bubble.text.setText(step.text)
        bubble.back_button.setEnabled(index > 0)
        last = index == len(self.steps) - 1
        bubble.next_button.setText("Done" if last else "Next")
        bubble.next_button.setToolTip("End the tour" if last else "The next page")
        self._place()
        self.highlight.show()
        self.highlight.raise_()
        bubble.show()
        bubble.raise_()
        bubble.next_button.setFocus()  # Enter or Space goes on; Tab reaches Back and Skip

    def _target_rect(self) -> QRect:
        """The outlined item's rectangle, in window coordinates."""
        from app.models.pages import PAGE_KEYS

        sidebar = self.window.sidebar
        item = sidebar.item(PAGE_KEYS.index(self.steps[self.step_index].page))
        rect = sidebar.visualItemRect(item)
        top_left = sidebar.viewport().mapTo(self.window, rect.topLeft())
        return QRect(top_left, rect.size()).adjusted(-2, -2, 2, 2)

    def keep_clear_rects(self, named_only: bool = False) -> list[QRect]:
        """Window rectangles of the step's page controls the bubble leaves visible: the ones the step names
        (a control in a card keeps its whole card clear) and, unless ``named_only``, every button shown."""
        step = self.steps[self.step_index]
        page = self.window.page(step.page)
        named = [getattr(page, name, None) for name in step.keep_clear]
        buttons = [] if named_only else [b for b in page.findChildren(QAbstractButton) if b.window() is self.window]
        rects = []
        for widget in [*named, *buttons]:
            if widget is None or not widget.isVisible():
                continue
            holder = widget.parentWidget()
            if widget in named and holder is not None and holder.property("role") == "card":
                widget = holder  # a named control's card, its description included
            rects.append(QRect(widget.mapTo(self.window, QPoint(0, 0)), widget.size()))
        return rects

    def _place(self) -> None:
        if self.step_index < 0 or not self.active:
            return
        target = self._target_rect()
        self.highlight.setGeometry(target)
        self.bubble.adjustSize()
        size = self.bubble.size()  # its fixed width (sizeHint says less) and the height for it
        clear = [target, *self.keep_clear_rects()]
        bottom = self.window.height() - size.height() - 12
        right = self.window.width() - size.width() - 12
        # Beside the item, level with it; else just below a control to keep clear; else at the bottom; first
        # beside the sidebar, then at the window's right edge. The first spot that covers nothing wins; in a
        # window too small for that, the one that covers least.
        ys = [target.top(), *(rect.bottom() + GAP for rect in sorted(clear[1:], key=QRect.bottom)), bottom]
        xs = [x for x in (target.right() + GAP, right) if target.right() < x <= right] or [target.right() + GAP]
        spots = [QRect(QPoint(x, y), size) for x in xs for y in ys if 8 <= y <= bottom]

        named = [target, *self.keep_clear_rects(named_only=True)]

        def covered(spot: QRect) -> int:  # what the step points at counts far more than another button
            return sum((1000 if rect in named else 1) * spot.intersected(rect).width() * spot.intersected(rect).height()
                       for rect in clear if spot.intersects(rect))

        best = min(spots, key=covered, default=QRect(QPoint(target.right() + GAP, min(target.top(), bottom)), size))
        self.bubble.move(QPoint(best.x(), max(8, best.y())))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if (self.active and event.type() in (QEvent.Type.Resize, QEvent.Type.Move)
                and watched in (self.window, self.window.sidebar, self.window.stack)):
            # After the layout has settled: the page's controls move in the same pass.
            QTimer.singleShot(0, self, self._place)
        return False


class _AfterFirstPaint(QObject):
    """Starts the window's tour once the window has painted (first run only)."""

    def __init__(self, window: QWidget):
        super().__init__(window)
        self._window = window

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if watched is self._window and event.type() == QEvent.Type.Paint:
            self._window.removeEventFilter(self)
            # After this paint is handled, so the window is on screen before the bubble.
            QTimer.singleShot(0, lambda: tour_for(self._window).start())
        return False


def start_first_run_tour(window: QWidget) -> bool:
    """Start the tour after ``window`` first paints, unless it was finished or skipped before.

    Called from run_gui only: a MainWindow built by a test or a second window never tours.
    """
    if tour_done():
        return False
    window.installEventFilter(_AfterFirstPaint(window))
    return True
