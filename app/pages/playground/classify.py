"""A classifier in the Playground: type a text (or choose or drop an image, for an image classifier), see every
class's probability, for a fine-tune and its variants.

``playground.predict`` answers ``{label, labels, probs, seconds, model}``. The view asks each model shown
at once: the fine-tune and each of its finished compression variants (``compress.variants``), so a
quantized ONNX file can be checked against the model it came from on the same text.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.pages.playground.choices import Choice
from app.widgets.common import card, label, show_text
from engine.api.protocol import RpcError

BAR_STEPS = 1000
COLUMNS = 3  # cards a row; more variants go on the next row (a narrow window scrolls down, never sideways)
CARD_MIN_WIDTH = 190


def percent_text(p: float) -> str:
    return f"{100 * p:.1f}%"


class ResultCard(QFrame):
    """One model's answer: the predicted label, then a bar per class with its probability."""

    def __init__(self, choice: Choice, parent: QWidget | None = None):
        super().__init__(parent)
        self.choice = choice
        self.result: dict[str, Any] = {}
        self.setProperty("role", "card")
        box = QVBoxLayout(self)
        box.setContentsMargins(14, 12, 14, 12)
        box.setSpacing(6)
        self.title = label(choice.title, "h2", wrap=True)
        self.title.setToolTip(choice.detail)
        box.addWidget(self.title)
        self.label_text = label("", wrap=True)
        box.addWidget(self.label_text)
        self.grid = QGridLayout()
        self.grid.setHorizontalSpacing(8)
        self.grid.setVerticalSpacing(4)
        self.grid.setColumnStretch(1, 1)
        box.addLayout(self.grid)
        self.note = label("", "muted", wrap=True)
        box.addWidget(self.note)
        self.error = label("", "error", wrap=True)
        self.error.hide()
        box.addWidget(self.error)
        self.bars: dict[str, QProgressBar] = {}
        self.percents: dict[str, str] = {}  # class -> the text shown beside its bar

    def waiting(self) -> None:
        self._clear_rows()
        self.label_text.setText("")
        show_text(self.error, "")
        self.note.setText("Loading and classifying…")

    def show_result(self, result: dict[str, Any]) -> None:
        self._clear_rows()
        show_text(self.error, "")
        self.result = result
        labels, probs = list(result.get("labels") or []), [float(p) for p in result.get("probs") or []]
        top = result.get("label", "")
        self.label_text.setText(f"<b>{top}</b> · {percent_text(max(probs) if probs else 0)}")
        for row, (name, p) in enumerate(zip(labels, probs, strict=False)):
            name_label = label(name)
            bar = QProgressBar()
            bar.setRange(0, BAR_STEPS)
            bar.setValue(round(BAR_STEPS * p))
            bar.setTextVisible(False)
            bar.setFixedHeight(10)
            bar.setAccessibleName(f"{name}: {percent_text(p)}")
            value = label(percent_text(p))
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            value.setMinimumWidth(48)
            if name == top:
                name_label.setText(f"<b>{name}</b>")
            self.grid.addWidget(name_label, row, 0)
            self.grid.addWidget(bar, row, 1)
            self.grid.addWidget(value, row, 2)
            self.bars[name] = bar
            self.percents[name] = value.text()
        seconds = result.get("seconds")
        self.note.setText(f"Answered in {1000 * float(seconds):.1f} ms" if isinstance(seconds, (int, float)) else "")

    def show_error(self, message: str, hint: str) -> None:
        self._clear_rows()
        self.label_text.setText("")
        self.note.setText("")
        show_text(self.error, message + (f"\n{hint}" if hint else ""))

    def _clear_rows(self) -> None:
        while self.grid.count():
            item = self.grid.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.bars, self.percents, self.result = {}, {}, {}


class ClassifyView(QWidget):
    def __init__(self, client: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self._client = client
        self.models: list[Choice] = []
        self.cards: list[ResultCard] = []
        self._generation = 0

        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(8)
        frame, inner = card()
        self.title_label = label("Text to classify", "h2")
        inner.addWidget(self.title_label)
        self.text_edit = QPlainTextEdit()
        self.text_edit.setPlaceholderText("Type or paste a text, e.g. a support ticket")
        self.text_edit.setAccessibleName("Text to classify")
        self.text_edit.setFixedHeight(80)
        inner.addWidget(self.text_edit)
        # An image classifier takes a file instead: chosen, or dropped anywhere on the view.
        self.image_row = QWidget()
        image_box = QHBoxLayout(self.image_row)
        image_box.setContentsMargins(0, 0, 0, 0)
        self.image_button = QPushButton("Choose image…")
        self.image_button.clicked.connect(self._choose_image)
        self.image_thumb = QLabel()
        self.image_thumb.setFixedSize(64, 64)
        self.image_thumb.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.image_label = label("No image yet: choose one, or drop it here.", "muted", wrap=True)
        image_box.addWidget(self.image_button)
        image_box.addWidget(self.image_thumb)
        image_box.addWidget(self.image_label, 1)
        inner.addWidget(self.image_row)
        self.image_row.setVisible(False)
        self.image_path = ""
        self.images = False
        self.setAcceptDrops(True)
        row = QHBoxLayout()
        self.models_note = label("", "muted", wrap=True)
        row.addWidget(self.models_note, 1)
        self.classify_button = QPushButton("Classify")
        self.classify_button.setProperty("role", "primary")
        self.classify_button.setToolTip("Every model shown gives each class's probability for this text")
        self.classify_button.clicked.connect(self.classify)
        row.addWidget(self.classify_button, 0, Qt.AlignmentFlag.AlignTop)
        inner.addLayout(row)
        box.addWidget(frame)

        self.results = QWidget()
        self.results_grid = QGridLayout(self.results)
        self.results_grid.setContentsMargins(0, 0, 0, 0)
        self.results_grid.setSpacing(10)
        self.results_grid.setAlignment(Qt.AlignmentFlag.AlignTop)
        scroll = QScrollArea()
        scroll.setObjectName("classifyResults")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(self.results)
        box.addWidget(scroll, 1)
        self.text_edit.textChanged.connect(self._update)
        client.connected.connect(lambda *_: self._update())
        client.disconnected.connect(self._update)
        self._update()

    def set_models(self, models: list[Choice]) -> None:
        """Show a card per model (the fine-tune first, then its variants)."""
        if [m.key for m in models] == [m.key for m in self.models]:
            return
        self._generation += 1
        self.models = list(models)
        for old in self.cards:
            old.deleteLater()
        self.cards = []
        while self.results_grid.count():
            self.results_grid.takeAt(0)
        columns = min(COLUMNS, max(1, len(self.models)))
        for i, choice in enumerate(self.models):
            result = ResultCard(choice)
            result.setMinimumWidth(CARD_MIN_WIDTH)
            self.results_grid.addWidget(result, i // columns, i % columns)
            self.cards.append(result)
        for column in range(COLUMNS):
            self.results_grid.setColumnStretch(column, 1 if column < columns else 0)
        rows = (len(self.models) + columns - 1) // columns
        for row in range(rows + 1):  # the cards as tall as they need, the room left below them
            self.results_grid.setRowStretch(row, 1 if row == rows else 0)
        self.images = any(m.task == "image_classification" for m in self.models)
        self.text_edit.setVisible(not self.images)
        self.image_row.setVisible(self.images)
        self.title_label.setText("Image to classify" if self.images else "Text to classify")
        n = len(self.models)
        variants = "its variant" if n == 2 else f"its {n - 1} variants"
        self.models_note.setText("" if n < 2 else f"{n} models side by side: the fine-tune and {variants}.")
        self._update()

    def set_image(self, path: str) -> None:
        self.image_path = path
        picture = QPixmap(path)
        self.image_thumb.setPixmap(picture.scaled(64, 64, Qt.AspectRatioMode.KeepAspectRatio,
                                                  Qt.TransformationMode.SmoothTransformation)
                                   if not picture.isNull() else QPixmap())
        self.image_label.setText(path)
        self._update()

    def _choose_image(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose an image to classify", self.image_path,
                                              "Images (*.png *.jpg *.jpeg *.bmp *.gif *.webp);;All files (*)",
                                              options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self.set_image(path)

    def dragEnterEvent(self, event: Any) -> None:  # noqa: N802 - Qt's naming
        if self.images and event.mimeData().hasUrls() and event.mimeData().urls()[0].isLocalFile():
            event.acceptProposedAction()

    def dropEvent(self, event: Any) -> None:  # noqa: N802
        self.set_image(event.mimeData().urls()[0].toLocalFile())
        event.acceptProposedAction()
        self.classify()

    def classify(self) -> None:
        text = self.text_edit.toPlainText().strip()
        given = {"image": self.image_path} if self.images else {"text": text}
        if not (self.image_path if self.images else text) or not self.cards:
            return
        self._generation += 1
        generation = self._generation
        for result in self.cards:
            result.waiting()
            self._client.request(
                "playground.predict", {"model": result.choice.ref, **given},
                lambda reply, c=result: generation == self._generation and c.show_result(reply),
                lambda err, c=result: generation == self._generation and self._failed(c, err))

    def _failed(self, result: ResultCard, err: RpcError) -> None:
        result.show_error(err.message, err.hint)

    def _update(self, *_args: Any) -> None:
        given = self.image_path if self.images else self.text_edit.toPlainText().strip()
        self.classify_button.setEnabled(bool(given) and bool(self.cards) and self._client.is_connected)
