"""Runs › Lineage…: where a run's model came from (``jobs.lineage``), with Save as Markdown or JSON.

The engine hashes the data, model and artifact files in a thread (seconds for a big folder the
first time, cached after), so the dialog opens at once and fills in when the reply comes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.widgets.common import label
from engine.api.lineage_report import to_markdown


class LineageDialog(QDialog):
    loaded = Signal(dict)
    failed = Signal(str)

    def __init__(self, client: Any, job_id: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Lineage of {job_id}")
        self.resize(820, 640)
        self._client = client
        self.job_id = job_id
        self.record: dict[str, Any] | None = None

        layout = QVBoxLayout(self)
        self.status = label("Reading the run and hashing its files…", "muted", wrap=True)
        layout.addWidget(self.status)
        self.view = QTextBrowser()
        self.view.setOpenExternalLinks(False)
        layout.addWidget(self.view, 1)
        buttons = QHBoxLayout()
        self.save_md_button = QPushButton("Save as Markdown…")
        self.save_md_button.clicked.connect(lambda: self._save_clicked("md"))
        self.save_json_button = QPushButton("Save as JSON…")
        self.save_json_button.clicked.connect(lambda: self._save_clicked("json"))
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        buttons.addWidget(self.save_md_button)
        buttons.addWidget(self.save_json_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout.addLayout(buttons)
        self._set_saving(False)
        client.request("jobs.lineage", {"id": job_id}, self._on_record, self._on_error)

    def _set_saving(self, enabled: bool) -> None:
        self.save_md_button.setEnabled(enabled)
        self.save_json_button.setEnabled(enabled)

    def _on_record(self, rec: dict[str, Any]) -> None:
        self.record = rec
        self.markdown = to_markdown(rec)
        self.view.setMarkdown(self.markdown)
        parents = len(rec.get("parents") or [])
        self.status.setText(f"{rec['run'].get('kind')} run {self.job_id}: "
                            f"{parents} parent run{'s' if parents != 1 else ''}, "
                            f"{len(rec.get('artifacts') or [])} artifacts; packages recorded "
                            f"{(rec.get('packages') or {}).get('recorded', '?')}.")
        self._set_saving(True)
        self.loaded.emit(rec)

    def _on_error(self, err: Any) -> None:
        self.status.setText(f"Could not build the lineage: {err}")
        self.failed.emit(str(err))

    def text(self) -> str:
        """What the dialog shows, as plain text."""
        return self.view.toPlainText()

    def _save_clicked(self, kind: str) -> None:
        name = f"lineage-{self.job_id}.{kind}"
        filt = "Markdown (*.md)" if kind == "md" else "JSON (*.json)"
        path, _ = QFileDialog.getSaveFileName(self, "Save the lineage", name, filt,
                                              options=QFileDialog.Option.DontUseNativeDialog)
        if path:
            self.save(path)

    def save(self, path: str) -> None:
        """Write the record: JSON for a .json name, else Markdown."""
        if self.record is None:
            return
        text = json.dumps(self.record, indent=1) + "\n" if path.lower().endswith(".json") else self.markdown
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            self.status.setText(f"Could not save {path}: {exc}")
            return
        self.status.setText(f"Saved to {path}")
