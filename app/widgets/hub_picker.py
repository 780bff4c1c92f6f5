"""A model from the Hugging Face Hub: its id (searched as you type), a revision, and a Download button.

Search asks the engine (``models.search``) a moment after the last key press; the results show each
model's downloads, licence and whether it is gated, and a click puts its id in the field. Offline the
engine answers within seconds and the picker says so: an id typed by hand still works for a model
already in the cache. Download starts a ``model.download`` job and follows its ``progress`` events
(bytes, speed, ETA) to the end. Used by the New fine-tune Model step and the Models page; with
``repo_type="dataset"`` (no search) by the Data step, for a fine-tune's ``data.hub``.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.text import format as fmt
from app.widgets.common import label, row_table, show_text
from engine.api.job_terms import FINAL_STATES, MODEL_DOWNLOAD, SUCCEEDED
from engine.api.train_spec import HUB_ID, HUB_REVISION

SEARCH_MS = 400  # after the last key press
SEARCH_LIMIT = 10
COLUMNS = ("Model", "Downloads", "Licence", "Gated")


def gated_text(gated: Any) -> str:
    return "no" if not gated else "yes (request access)" if gated == "manual" else "yes"


class HubPicker(QWidget):
    changed = Signal()  # the id or the revision was edited
    downloaded = Signal(dict)  # a download job succeeded: its result {repo_id, path, ...}

    def __init__(self, client: Any, parent: QWidget | None = None, search: bool = True, repo_type: str = "model"):
        super().__init__(parent)
        self._client = client
        self.repo_type = repo_type
        dataset = repo_type == "dataset"
        self._search_on = search and not dataset  # models.search looks for models
        self._generation = 0
        self._filling = False
        self.job_id: str | None = None
        self._sub: Any = None

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        self.id_edit = QLineEdit()
        self.id_edit.setPlaceholderText("owner/name" if dataset else "owner/name, or words to search for")
        self.id_edit.setToolTip("The dataset's id on the Hugging Face Hub, as on its page (e.g. stanfordnlp/imdb). "
                                "Job file: data.hub." if dataset else
                                "The model's id on the Hugging Face Hub, as on its page (e.g. "
                                "Qwen/Qwen2.5-0.5B-Instruct); type words to search. Job file: model.hub.")
        self.id_edit.setAccessibleName(f"Hugging Face {repo_type} id")
        form.addRow(label(f"Hub {repo_type}"), self.id_edit)
        self.rev_edit = QLineEdit()
        self.rev_edit.setPlaceholderText("main")
        self.rev_edit.setToolTip(f"A branch, tag or commit of the {repo_type}; empty = main. Job file: "
                                 f"{'data' if dataset else 'model'}.revision.")
        self.rev_edit.setAccessibleName("Revision")
        form.addRow(label("Revision"), self.rev_edit)
        outer.addLayout(form)

        self.search_note = label("", "muted", wrap=True)
        self.search_note.hide()
        outer.addWidget(self.search_note)
        self.results = row_table(COLUMNS, "Search results")
        self.results.setToolTip("Models on the Hub whose id holds what you typed; click one to use it")
        self.results.setMaximumHeight(220)
        self.results.cellClicked.connect(lambda row, _col: self.choose(row))
        self.results.hide()
        outer.addWidget(self.results)

        row = QHBoxLayout()
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip(f"Download the {repo_type} into the Hugging Face cache now (a fine-tune "
                                        "also downloads it as it starts)")
        self.download_button.clicked.connect(self.download)
        row.addWidget(self.download_button)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setAccessibleName("Download progress")
        self.progress.setTextVisible(False)
        self.progress.hide()
        row.addWidget(self.progress, 1)
        outer.addLayout(row)
        self.progress_text = label("", "muted", wrap=True)
        self.progress_text.hide()
        outer.addWidget(self.progress_text)

        self._timer = QTimer(self, singleShot=True, interval=SEARCH_MS)
        self._timer.timeout.connect(self._search)
        self.id_edit.textChanged.connect(self._typed)
        self.rev_edit.textChanged.connect(lambda _t: self.changed.emit())
        self._typed(self.id_edit.text())

    # -- the id -------------------------------------------------------------------------------

    def repo_id(self) -> str:
        return self.id_edit.text().strip()

    def revision(self) -> str | None:
        return self.rev_edit.text().strip() or None

    def set_model(self, repo_id: str | None, revision: str | None = None) -> None:
        self._filling = True
        self.id_edit.setText(repo_id or "")
        self.rev_edit.setText(revision or "")
        self._filling = False
        self._typed(self.id_edit.text(), search=False)

    def valid_id(self) -> bool:
        return bool(re.fullmatch(HUB_ID, self.repo_id()))

    def valid_revision(self) -> bool:
        return self.revision() is None or bool(re.fullmatch(HUB_REVISION, self.revision() or ""))

    def _typed(self, _text: str, search: bool = True) -> None:
        self.download_button.setEnabled(self.valid_id() and self.valid_revision() and not self._downloading())
        if not self._filling:
            self.changed.emit()
        if search and self._search_on and not self._filling and len(self.repo_id()) >= 2:
            self._timer.start()
        elif not self.repo_id():
            self._timer.stop()
            self.results.hide()
            self.search_note.hide()

    # -- search -------------------------------------------------------------------------------

    def _search(self) -> None:
        self._generation += 1
        generation = self._generation
        show_text(self.search_note, "Searching the Hugging Face Hub…")
        self._client.request("models.search", {"text": self.repo_id()[:200], "limit": SEARCH_LIMIT},
                             lambda reply: generation == self._generation and self._found(reply),
                             lambda err: generation == self._generation and self._search_failed(err))

    def _found(self, reply: dict[str, Any]) -> None:
        models = reply.get("models") or []
        self.results.setRowCount(len(models))
        for r, m in enumerate(models):
            cells = (m.get("repo_id") or "", f"{m.get('downloads') or 0:,}", m.get("license") or "—",
                     gated_text(m.get("gated")))
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text + ("  (cached)" if c == 0 and m.get("cached") else ""))
                item.setData(Qt.ItemDataRole.UserRole, m.get("repo_id"))
                item.setToolTip(f"{m.get('repo_id')}: {fmt.size(m['size_bytes'])}" if m.get("size_bytes")
                                else str(m.get("repo_id")))
                self.results.setItem(r, c, item)
        self.results.setVisible(bool(models))
        exact = any(m.get("repo_id") == self.repo_id() for m in models)
        show_text(self.search_note, "" if models and not exact else
                  "" if exact else "No model on the Hub matches; check the spelling.")

    def _search_failed(self, err: Any) -> None:
        self.results.hide()
        hint = getattr(err, "hint", "")
        show_text(self.search_note, f"Search is unavailable: {getattr(err, 'message', err)}"
                  + (f". {hint}" if hint else ""))

    def choose(self, row: int) -> None:
        item = self.results.item(row, 0)
        if item is None:
            return
        self.set_model(item.data(Qt.ItemDataRole.UserRole), self.revision())
        self.results.hide()
        self.search_note.hide()
        self.changed.emit()

    # -- download -----------------------------------------------------------------------------

    def _downloading(self) -> bool:
        return self.job_id is not None

    def download(self) -> None:
        if not self.valid_id() or self._downloading():
            return
        spec: dict[str, Any] = {"repo_id": self.repo_id()}
        if self.revision():
            spec["revision"] = self.revision()
        if self.repo_type != "model":
            spec["repo_type"] = self.repo_type
        self.download_button.setEnabled(False)
        self.progress.setValue(0)
        self.progress.show()
        show_text(self.progress_text, f"Starting the download of {self.repo_id()}…")
        self._client.request("jobs.start", {"kind": MODEL_DOWNLOAD, "spec": spec,
                                            "name": f"download {self.repo_id()}"},
                             self._started, self._start_failed)

    def _started(self, job: dict[str, Any]) -> None:
        self.job_id = job["id"]
        self._sub = self._client.subscribe([f"run/{job['id']}/*"], self._on_event, since=0)

    def _start_failed(self, err: Any) -> None:
        self.progress.hide()
        show_text(self.progress_text, f"The download did not start: {getattr(err, 'message', err)}")
        self._typed(self.id_edit.text(), search=False)

    def _on_event(self, topic: str, _seq: int, data: dict[str, Any]) -> None:
        kind = topic.rsplit("/", 1)[-1]
        if kind == "status" and data.get("state") in FINAL_STATES:
            self._ask_final()
        elif kind == "progress":
            self.progress.setValue(int(1000 * min(1.0, float(data.get("fraction") or 0))))
            show_text(self.progress_text, str(data.get("message") or ""))
        elif kind == "error":
            show_text(self.progress_text, f"{data.get('message')}\n{data.get('hint') or ''}".strip())

    def _ask_final(self) -> None:
        if self.job_id is not None:
            self._client.request("jobs.get", {"id": self.job_id}, self._finished, lambda _err: None)

    def _finished(self, job: dict[str, Any]) -> None:
        if job.get("state") not in FINAL_STATES:  # the engine records the end a moment after the job says it
            QTimer.singleShot(300, self, self._ask_final)
            return
        if self._sub is not None:
            self._client.unsubscribe(self._sub)
            self._sub = None
        self.job_id = None
        if job.get("state") == SUCCEEDED:
            result = job.get("result") or {}
            self.progress.setValue(1000)
            show_text(self.progress_text, f"Downloaded: {fmt.size(result.get('size_bytes'))} in "
                                          f"{result.get('path')}")
            self.downloaded.emit(result)
        else:
            error = job.get("error") or {}
            self.progress.hide()
            show_text(self.progress_text, f"Download {job.get('state')}: {error.get('message') or ''}\n"
                                          f"{error.get('hint') or ''}".strip())
        self._typed(self.id_edit.text(), search=False)
