"""Scrolling a page never changes a value: value controls take the mouse wheel only when focused.

Qt gives spin boxes, drop-downs and sliders the wheel as soon as the pointer passes over
them (their focus policy is WheelFocus), so a user scrolling a long form silently changes
whatever slides under the pointer. One application-wide event filter fixes every form at
once, dialogs and rows added later included:

- on Polish, such a control's focus policy becomes StrongFocus (click or Tab, never the
  wheel), because Qt hands out wheel focus before any event filter runs;
- a wheel event on such a control without keyboard focus is passed to the nearest
  scroll area, which scrolls the page as the user meant; the control keeps its value.

Scroll bars are sliders too, and keep their wheel.

Charts (pyqtgraph's plots are graphics views) zoom on the wheel. A page of charts would zoom whichever chart
passed under the pointer instead of scrolling, so a chart takes the wheel only once clicked (it has focus)
or with Ctrl held, as map and chart apps do; otherwise the page scrolls. Each chart's "Fit to data" resets
a zoom.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QGraphicsView,
    QScrollBar,
    QWidget,
)

_VALUE_CONTROLS = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def is_value_control(widget: QObject) -> bool:
    """A control whose value the wheel would change."""
    return isinstance(widget, _VALUE_CONTROLS) and not isinstance(widget, QScrollBar)


def chart_of(widget: QObject) -> QGraphicsView | None:
    """The chart whose drawing area ``widget`` is (a graphics view's viewport), else None."""
    parent = widget.parentWidget() if isinstance(widget, QWidget) else None
    return parent if isinstance(parent, QGraphicsView) and parent.viewport() is widget else None


def _scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


class WheelGuard(QObject):
    """The application-wide filter; ``install()`` adds it once."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        kind = event.type()
        if kind == QEvent.Type.Polish and is_value_control(watched):
            if watched.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            return False
        if kind == QEvent.Type.Polish and isinstance(watched, QGraphicsView):
            watched.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # a click hands it the wheel; Tab passes by
            return False
        if kind != QEvent.Type.Wheel:
            return False
        chart = chart_of(watched)
        if chart is not None:
            if chart.hasFocus() or event.modifiers() & Qt.KeyboardModifier.ControlModifier:
                return False  # clicked first, or Ctrl: the chart zooms
            owner: QWidget = chart
        elif is_value_control(watched) and not watched.hasFocus():
            owner = watched
        else:
            return False
        area = _scroll_area_of(owner)
        if area is not None:
            viewport = area.viewport()
            pos = viewport.mapFromGlobal(watched.mapToGlobal(event.position()))
            QApplication.sendEvent(viewport, QWheelEvent(
                pos, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                event.modifiers(), event.phase(), event.inverted()))
        event.accept()  # handled: the page scrolled (or nothing did); the value stays
        return True


def install(app: QApplication | None = None) -> WheelGuard | None:
    """Filter every widget's wheel events (idempotent). Returns the filter, or None without an app."""
    app = app or QApplication.instance()
    if app is None:
        return None
    guard = app.findChild(WheelGuard, "emberWheelGuard")
    if guard is None:
        guard = WheelGuard(app)
        guard.setObjectName("emberWheelGuard")
        app.installEventFilter(guard)
        for widget in app.allWidgets():  # widgets polished before the filter was there
            if is_value_control(widget) and widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    return guard
