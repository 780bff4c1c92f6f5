"""Evaluate…: what to score the chosen model on, before the evaluate.model job starts.

The data is the run's validation data (the default: every model of the family is scored on the same
rows), a built-in dataset's validation file, or a file the user picks; a language model can run lm-eval
tasks too (lm-eval's own, or tasks defined by YAML files in a folder). The base model is evaluated as
well when it has no result on that data yet, so the table has its row to compare with.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import label

VALIDATION = "validation"
FILE = "file"
BUILTIN_DATA = {"causal_lm": ("short-answers", "tiny-instructions"), "text_classification": ("support-tickets",)}


class EvaluateDialog(QDialog):
    """``values()`` once accepted: {data, limit, max_new_tokens, lm_eval, with_base}."""

    def __init__(self, model_label: str, run_label: str, task: str, base_missing: bool,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Evaluate")
        self.language = task != "text_classification"
        self._base_missing = base_missing
        outer = QVBoxLayout(self)
        outer.addWidget(label(f"Score {model_label}", "h2"))
        outer.addWidget(label("Answers are generated greedily and compared with the references (exact match, "
                              "token F1, ROUGE-L, BLEU, chrF)." if self.language else
                              "Each row's predicted label is compared with its label (accuracy, macro F1).",
                              "muted", wrap=True))
        form = QFormLayout()
        self.data_combo = QComboBox()
        self.data_combo.addItem(f"Validation data of {run_label}", VALIDATION)
        for name in BUILTIN_DATA.get(task, BUILTIN_DATA["causal_lm"]):
            self.data_combo.addItem(f"Built-in: {name} (its validation file)", name)
        self.data_combo.addItem("A file…", FILE)
        self.data_combo.setToolTip("The same data for every model makes their scores comparable")
        form.addRow("Data", self.data_combo)
        self.file_edit = QLineEdit()
        self.file_edit.setPlaceholderText("a .jsonl file (prompt/response or messages rows)" if self.language
                                          else "a .csv or .jsonl file with text and label columns")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_data)
        self.file_row = QWidget()
        row = QHBoxLayout(self.file_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.file_edit, 1)
        row.addWidget(browse)
        form.addRow("File", self.file_row)
        self.limit_spin = QSpinBox()
        self.limit_spin.setRange(0, 1_000_000)
        self.limit_spin.setValue(100)
        self.limit_spin.setSpecialValueText("every row")
        form.addRow("Rows", self.limit_spin)
        self.tokens_spin = QSpinBox()
        self.tokens_spin.setRange(1, 4096)
        self.tokens_spin.setValue(64)
        self.tokens_spin.setToolTip("The longest answer generated, in tokens")
        form.addRow("Max new tokens", self.tokens_spin)
        self.tasks_edit = QLineEdit()
        self.tasks_edit.setPlaceholderText("optional: lm-eval tasks, comma-separated (e.g. arc_easy)")
        self.tasks_edit.setToolTip("Tasks from lm-eval's catalogue download their data from the Hugging Face "
                                   "Hub; tasks defined in a folder of YAML files run offline")
        form.addRow("lm-eval tasks", self.tasks_edit)
        self.include_edit = QLineEdit()
        self.include_edit.setPlaceholderText("optional: a folder of task YAML files")
        include_browse = QPushButton("Browse…")
        include_browse.clicked.connect(self._browse_tasks)
        self.include_row = QWidget()
        row = QHBoxLayout(self.include_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.include_edit, 1)
        row.addWidget(include_browse)
        form.addRow("Task folder", self.include_row)
        self.docs_spin = QSpinBox()
        self.docs_spin.setRange(0, 1_000_000)
        self.docs_spin.setSpecialValueText("every document")
        form.addRow("Documents per task", self.docs_spin)
        outer.addLayout(form)
        self.base_check = QCheckBox("Also evaluate the base model, which has no result on this data yet")
        self.base_check.setChecked(base_missing)
        self.base_check.setVisible(base_missing)
        outer.addWidget(self.base_check)
        self.error = label("", "error", wrap=True)
        self.error.hide()
        outer.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.start_button = buttons.addButton("Start", QDialogButtonBox.ButtonRole.AcceptRole)
        self.start_button.setProperty("role", "primary")
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        outer.addWidget(buttons)
        for widget in (self.tokens_spin, self.tasks_edit, self.include_row, self.docs_spin):
            widget.setEnabled(self.language)
        self.data_combo.currentIndexChanged.connect(self._sync)
        self._sync()

    def _sync(self) -> None:
        self.file_row.setEnabled(self.data_combo.currentData() == FILE)

    def _browse_data(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Data to score", "", "Data (*.jsonl *.csv *.tsv);;All files (*)")
        if path:
            self.file_edit.setText(path)

    def _browse_tasks(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder of lm-eval task YAML files")
        if path:
            self.include_edit.setText(path)

    def set_values(self, data: str | None = None, limit: int | None = None, tasks: str = "",
                   include_path: str = "", docs: int | None = None) -> None:
        """Fill the form (tests, screenshot scripts): data None = the validation data."""
        if data is None:
            self.data_combo.setCurrentIndex(0)
        elif self.data_combo.findData(data) >= 0:
            self.data_combo.setCurrentIndex(self.data_combo.findData(data))
        else:
            self.data_combo.setCurrentIndex(self.data_combo.findData(FILE))
            self.file_edit.setText(data)
        if limit is not None:
            self.limit_spin.setValue(limit)
        self.tasks_edit.setText(tasks)
        self.include_edit.setText(include_path)
        if docs is not None:
            self.docs_spin.setValue(docs)

    def values(self) -> dict[str, Any]:
        choice = self.data_combo.currentData()
        data = None if choice == VALIDATION else (self.file_edit.text().strip() if choice == FILE else choice)
        tasks = [t.strip() for t in self.tasks_edit.text().split(",") if t.strip()] if self.language else []
        lm_eval = None
        if tasks:
            lm_eval = {"tasks": tasks}
            if self.include_edit.text().strip():
                lm_eval["include_path"] = self.include_edit.text().strip()
            if self.docs_spin.value():
                lm_eval["limit"] = self.docs_spin.value()
        return {"data": data, "limit": self.limit_spin.value(), "max_new_tokens": self.tokens_spin.value(),
                "lm_eval": lm_eval, "with_base": self._base_missing and self.base_check.isChecked()}

    def _accept(self) -> None:
        if self.data_combo.currentData() == FILE and not self.file_edit.text().strip():
            self.error.setText("Pick the file to score, or choose the validation data.")
            self.error.show()
            return
        self.accept()
