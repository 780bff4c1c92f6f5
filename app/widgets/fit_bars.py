"""Will the run fit? A stacked memory bar per device, the verdict, and changes that make it fit.

Fed with the reply of ``estimate.fit``: per device, bytes of weights, gradients,
optimizer state, activations and overhead against its capacity. Each suggestion
becomes an "Apply: <change>" button that emits its ``spec_patch``.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.text import format as fmt
from app.widgets.common import label

PARTS = (  # (key, legend, colour): the order they stack in, from the left
    ("weights", "Weights", QColor("#1c7ed6")),
    ("gradients", "Gradients", QColor("#7048e8")),
    ("optimizer", "Optimizer", QColor("#e8590c")),
    ("activations", "Activations", QColor("#f59f00")),
    ("overhead", "Overhead", QColor("#868e96")),
)
TRACK = QColor("#eef1f4")  # free memory (headroom)
OVER = QColor("#e03131")
VERDICTS = {  # text, text colour, background: the stylesheet's state colours
    "fits": ("Fits", QColor("#1b6e2e"), QColor("#ebfbee")),
    "tight": ("Tight", QColor("#6b4b00"), QColor("#fff4d6")),
    "will_not_fit": ("Will not fit", QColor("#8a1c1c"), QColor("#fdecea")),
}


class VerdictBadge(QLabel):
    """The verdict as a coloured pill."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.verdict = ""
        self.setContentsMargins(10, 3, 10, 3)
        font = self.font()
        font.setBold(True)
        self.setFont(font)

    def set_verdict(self, verdict: str) -> None:
        self.verdict = verdict
        self.setText(VERDICTS.get(verdict, (verdict.replace("_", " ").capitalize(),))[0])
        self.setVisible(bool(verdict))
        self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        # Painted by hand: the stylesheet's text colour would win over a palette colour.
        _text, fg, bg = VERDICTS.get(self.verdict, ("", QColor("#4a5563"), QColor("#eef1f4")))
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(bg)
        painter.drawRoundedRect(QRectF(self.rect()), self.height() / 2, self.height() / 2)
        painter.setPen(fg)
        painter.setFont(self.font())
        painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.text())
        painter.end()


class DeviceBar(QWidget):
    """One device: parts stacked left to right, the rest of its capacity as free track."""

    def __init__(self, device: dict[str, Any], parent: QWidget | None = None):
        super().__init__(parent)
        self.device = device
        self.setMinimumHeight(22)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        parts = device.get("parts") or {}
        self.setToolTip("\n".join(f"{name}: {fmt.size(parts.get(key, 0))}" for key, name, _ in PARTS))

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(300, 22)

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        parts = self.device.get("parts") or {}
        capacity = float(self.device.get("capacity") or 0)
        total = float(self.device.get("total") or sum(float(v or 0) for v in parts.values()))
        scale_to = max(capacity, total, 1.0)
        width = self.width() - 2
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(TRACK)
        painter.drawRoundedRect(QRectF(1, 3, width, self.height() - 6), 4, 4)
        x = 1.0
        for key, _name, colour in PARTS:
            w = width * float(parts.get(key) or 0) / scale_to
            if w <= 0:
                continue
            painter.setBrush(colour)
            painter.drawRect(QRectF(x, 3, w, self.height() - 6))
            x += w
        if capacity and total > capacity:  # where the device runs out
            cut = 1 + width * capacity / scale_to
            painter.setPen(QPen(OVER, 2))
            painter.drawLine(int(cut), 0, int(cut), self.height())
        painter.end()


class Legend(QWidget):
    """A swatch and name per part, wrapped onto more lines when the card is narrow (never cut)."""

    ROW = 18

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    @staticmethod
    def entries() -> tuple[tuple[str, str, QColor], ...]:
        return (*PARTS, ("headroom", "Free", TRACK))

    def _places(self, width: int) -> list[tuple[int, int, str, QColor]]:
        """(x, row, name, colour) of each entry, wrapping at ``width``."""
        metrics = self.fontMetrics()
        x, row, out = 0, 0, []
        for _key, name, colour in self.entries():
            w = 14 + metrics.horizontalAdvance(name)
            if x and x + w > width:
                x, row = 0, row + 1
            out.append((x, row, name, colour))
            x += w + 14
        return out

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt override
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt override
        return (max(row for _x, row, _n, _c in self._places(width)) + 1) * self.ROW

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        width = sum(28 + self.fontMetrics().horizontalAdvance(name) for _k, name, _c in self.entries())
        return QSize(width, self.ROW)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        widest = max(self.fontMetrics().horizontalAdvance(name) for _k, name, _c in self.entries())
        return QSize(14 + widest, self.ROW)

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        for x, row, name, colour in self._places(self.width()):
            y = row * self.ROW
            painter.fillRect(x, y + 4, 10, 10, colour)
            painter.setPen(QColor("#5a6472"))
            painter.drawText(x + 14, y + 14, name)
        painter.end()


class FitBars(QWidget):
    """``set_estimate(reply)``, ``set_busy()``, ``set_error(text)``; emits ``apply_patch``."""

    apply_patch = Signal(dict)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.estimate: dict[str, Any] = {}
        self.suggestion_buttons: list[QPushButton] = []
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        head = QHBoxLayout()
        self.verdict_label = VerdictBadge()
        self.verdict_label.set_verdict("")
        head.addWidget(self.verdict_label)
        self.status = label("", "muted", wrap=True)
        head.addWidget(self.status, 1)
        column.addLayout(head)
        self.reason = label("", "", wrap=True)
        column.addWidget(self.reason)
        self._devices = QVBoxLayout()
        self._devices.setSpacing(6)
        column.addLayout(self._devices)
        self.legend = Legend()
        column.addWidget(self.legend)
        self.throughput = label("", "muted", wrap=True)
        column.addWidget(self.throughput)
        self._suggestions = QVBoxLayout()
        self._suggestions.setSpacing(4)
        column.addLayout(self._suggestions)
        self.notes = label("", "muted", wrap=True)
        column.addWidget(self.notes)
        self.set_busy()

    @property
    def verdict(self) -> str:
        return self.verdict_label.verdict

    def _clear(self) -> None:
        for layout in (self._devices, self._suggestions):
            while layout.count():
                item = layout.takeAt(0)
                if item.widget() is not None:  # every row is one widget
                    item.widget().deleteLater()
        self.suggestion_buttons = []

    def set_busy(self, text: str = "Estimating memory…") -> None:
        self.status.setText(text)
        self.status.setProperty("role", "muted")
        self.status.style().polish(self.status)

    def set_error(self, text: str) -> None:
        self.estimate = {}
        self._clear()
        self.verdict_label.set_verdict("")
        for widget in (self.reason, self.throughput, self.notes, self.legend):
            widget.hide()
        self.status.setText(f"No memory estimate: {text}")
        self.status.setProperty("role", "error")
        self.status.style().polish(self.status)

    def set_estimate(self, reply: dict[str, Any]) -> None:
        self.estimate = reply
        self._clear()
        self.verdict_label.set_verdict(str(reply.get("verdict") or ""))
        self.set_busy("")
        self.reason.setText(str(reply.get("reason") or ""))
        self.reason.setVisible(bool(self.reason.text()))
        for device in reply.get("devices") or []:
            self._add_device(device)
        self.legend.setVisible(bool(reply.get("devices")))
        self.throughput.setText(self._throughput_text(reply))
        self.throughput.setVisible(bool(self.throughput.text()))
        suggestions = reply.get("suggestions") or []
        if suggestions and reply.get("verdict") != "fits":
            self._suggestions.addWidget(label("Cheapest changes that make it fit:", "muted"))
        for suggestion in suggestions:
            total = suggestion.get("total")
            button = QPushButton(f"Apply: {suggestion.get('change', 'change')}"
                                 + (f"  (→ {fmt.size(total)})" if total else ""))
            if not self.suggestion_buttons and reply.get("verdict") != "fits":
                button.setProperty("role", "primary")
            patch = suggestion.get("spec_patch") or {}
            button.clicked.connect(lambda _c=False, p=patch: self.apply_patch.emit(p))
            self.suggestion_buttons.append(button)
            holder = QWidget()
            row = QHBoxLayout(holder)
            row.setContentsMargins(0, 0, 0, 0)
            row.addWidget(button)
            row.addStretch(1)
            self._suggestions.addWidget(holder)
        notes = reply.get("notes") or []
        self.notes.setText("\n".join(str(n) for n in notes))
        self.notes.setVisible(bool(notes))

    def _add_device(self, device: dict[str, Any]) -> None:
        total, capacity = device.get("total"), device.get("capacity")
        name = str(device.get("name") or device.get("kind") or "device")
        if device.get("rank") is not None and f"rank {device['rank']}" not in name:
            name = f"{name} (rank {device['rank']})"  # the engine may have named it already
        row = QHBoxLayout()
        title = label(name)
        title.setMinimumWidth(min(140, title.sizeHint().width()))
        row.addWidget(title)
        row.addWidget(DeviceBar(device), 1)
        amount = label(f"{fmt.size(total)} of {fmt.size(capacity)}", "muted")
        amount.setMinimumWidth(min(130, amount.sizeHint().width()))
        row.addWidget(amount)
        holder = QWidget()
        holder.setLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        self._devices.addWidget(holder)

    @staticmethod
    def _throughput_text(reply: dict[str, Any]) -> str:
        speed = reply.get("throughput") or {}
        params = reply.get("params") or {}
        bits = []
        if speed.get("samples_per_s"):
            bits.append(f"about {speed['samples_per_s']:,.0f} samples/s")
        if speed.get("tokens_per_s"):
            bits.append(f"{speed['tokens_per_s']:,.0f} tokens/s")
        text = ("Speed: " + ", ".join(bits) + (f" ({speed['basis']})" if speed.get("basis") else "")
                if bits else "")
        if params.get("total"):
            trainable = params.get("trainable") or 0
            text += ("\n" if text else "") + (
                f"Training {trainable:,} of {params['total']:,} parameters "
                f"({_share(trainable / params['total'])}).")
        return text


def _share(fraction: float) -> str:
    """0.33%, 4.2%, 100%: two significant figures below 10%, whole percent above (never 1e+02%)."""
    pct = 100 * fraction
    return f"{pct:.2g}%" if pct < 10 else f"{pct:.0f}%"
