"""The frame every wizard shares: numbered step buttons, a scrolling stack of steps, Back/Next/primary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.state.style import set_role
from app.widgets.common import label


@dataclass
class WizardFrame:
    step_buttons: list[QPushButton]
    stack: QStackedWidget
    status_label: QLabel
    back_button: QPushButton
    next_button: QPushButton
    primary_button: QPushButton


def build_wizard_frame(outer: QVBoxLayout, steps: Sequence[QWidget], go_to: Callable[[int], None],
                       current: Callable[[], int], primary: tuple[str, str, Callable[[], None]],
                       widest: str = "") -> WizardFrame:
    """Lay out ``steps`` in ``outer``; ``primary`` is (text, tooltip, slot) of the last button.

    ``widest`` is the longest text the primary button will show ("Start 12 jobs"): its width is
    kept from the start, so Back and Next never jump sideways when the text changes.
    """
    indicator = QHBoxLayout()
    indicator.setSpacing(6)
    buttons: list[QPushButton] = []
    for i, step in enumerate(steps):
        button = QPushButton(f"{i + 1}  {step.title}")
        button.setToolTip(f"Go to step {i + 1}: {step.title}")
        button.clicked.connect(lambda _c=False, i=i: go_to(i))
        buttons.append(button)
        indicator.addWidget(button)
        if i < len(steps) - 1:
            indicator.addWidget(label("›", "muted"))
    indicator.addStretch(1)
    outer.addLayout(indicator)

    stack = QStackedWidget()
    for step in steps:
        scroll = QScrollArea()
        scroll.setObjectName("pageScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        body = QWidget()
        body.setObjectName("pageBody")
        column = QVBoxLayout(body)
        column.setContentsMargins(0, 4, 8, 4)
        column.addWidget(step)
        scroll.setWidget(body)
        stack.addWidget(scroll)
    outer.addWidget(stack, 1)

    footer = QHBoxLayout()
    status = label("", "muted", wrap=True)
    footer.addWidget(status, 1)
    back = QPushButton("Back")
    back.clicked.connect(lambda: go_to(current() - 1))
    forward = QPushButton("Next")
    forward.clicked.connect(lambda: go_to(current() + 1))
    text, tip, slot = primary
    main = QPushButton(text)
    main.setProperty("role", "primary")
    main.setToolTip(tip)
    main.clicked.connect(slot)
    if widest:
        main.setText(widest)
        main.setMinimumWidth(main.sizeHint().width())
        main.setText(text)
    for button in (back, forward, main):
        footer.addWidget(button)
    outer.addLayout(footer)
    return WizardFrame(buttons, stack, status, back, forward, main)


def show_status(status: QLabel, text: str, role: str = "muted") -> None:
    """The footer's line: text, and the style of its role (muted, error, ...) when that changes."""
    status.setText(text)
    if status.property("role") != role:
        set_role(status, role)
        status.style().unpolish(status)
        status.style().polish(status)


def step_column(step: QWidget, header: QWidget) -> QVBoxLayout:
    """A step's layout, ``header`` on top: flush with the frame, whose scroll area pads every step alike."""
    column = QVBoxLayout(step)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(14)
    column.addWidget(header)
    return column
