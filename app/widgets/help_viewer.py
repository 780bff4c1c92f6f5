"""The manual inside the window: the shipped Markdown (app/shell/help.py) in a QTextBrowser.

Links between the docs ("settings.md#what-you-can-set") open here, with Back and
Forward; headings get GitHub's anchors so such links land on their heading; web links
go to the browser; a link to a file that did not ship says so instead of failing
silently. Screenshots are scaled down to the width of the text.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QImage, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.state.style import set_role
from app.text.manual import HOME_DOC, docs_dir, heading_slug, missing_docs_message

# The contents list, in reading order; docs not named here follow by title.
READING_ORDER = ("first-run.md", "gui.md", "recipes.md", "custom-models.md", "settings.md",
                 "shortcuts-and-accessibility.md", "notifications.md", "queue.md", "compression.md",
                 "export.md", "deploy-jetson.md", "remote-hosts.md", "speed.md", "estimator.md",
                 "troubleshooting.md", "cli.md")
IMAGE_MARGIN = 40  # px left of the viewport's width for a scaled screenshot
DOC_ROLE = Qt.ItemDataRole.UserRole  # a contents item's file name


def doc_title(path: Path) -> str:
    """A doc's first "# " heading, or its file name."""
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("# "):
                    return line[2:].strip().replace("`", "")
    except OSError:
        pass
    return path.stem.replace("-", " ").capitalize()


class DocBrowser(QTextBrowser):
    """A QTextBrowser for the docs folder: heading anchors, scaled images, link handling."""

    noted = Signal(str)  # what a link could not do, or "" when it worked

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setOpenLinks(False)  # every link goes through follow(), which knows what shipped
        self.anchorClicked.connect(self.follow)

    def follow(self, url: QUrl) -> None:
        note = ""
        if url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
            return
        target = self.source().resolved(url) if url.isRelative() else url
        path = Path(target.toLocalFile())
        if target.toLocalFile() == self.source().toLocalFile() or (path.suffix == ".md" and path.is_file()):
            self.setSource(target)
        elif path.is_file():
            QDesktopServices.openUrl(target)  # an image or a file of the source tree
        else:
            note = (f"{url.toString()} is not part of the documentation installed with Ember Studio; "
                    "it is in Ember Studio's source folder.")
        self.noted.emit(note)

    def doSetSource(self, name: QUrl, kind: QTextDocument.ResourceType) -> None:  # noqa: N802 - Qt override
        super().doSetSource(name, kind)
        self._name_headings()
        if name.hasFragment():
            self.scrollToAnchor(name.fragment())

    def _name_headings(self) -> None:
        """Give each heading its GitHub anchor (Qt's Markdown reader gives none)."""
        taken: dict[str, int] = {}
        block = self.document().begin()
        while block.isValid():
            if block.blockFormat().headingLevel() > 0 and block.text().strip():
                cursor = QTextCursor(block)
                cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                anchor = QTextCharFormat()
                anchor.setAnchor(True)
                anchor.setAnchorNames([heading_slug(block.text(), taken)])
                cursor.mergeCharFormat(anchor)
            block = block.next()

    def loadResource(self, kind: int, name: QUrl):  # noqa: N802 - Qt override
        resource = super().loadResource(kind, name)
        if kind == QTextDocument.ResourceType.ImageResource.value and resource is not None:
            image = resource if isinstance(resource, QImage) else QImage.fromData(resource)
            widest = max(320, self.viewport().width() - IMAGE_MARGIN)
            if not image.isNull() and image.width() > widest:
                return image.scaledToWidth(widest)
            return image
        return resource


class HelpViewer(QDialog):
    """The manual: a contents list, Back / Forward, and the page; ``open_doc("file.md#heading")``."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Ember Studio documentation")
        self.setModal(False)
        self.folder = docs_dir()

        self.back_button = QPushButton("Back")
        self.forward_button = QPushButton("Forward")
        self.home_button = QPushButton("Contents")
        self.home_button.setToolTip("The first page of the manual")
        self.note_label = QLabel("")
        self.note_label.setWordWrap(True)
        set_role(self.note_label, "muted")
        self.note_label.hide()
        bar = QHBoxLayout()
        for button in (self.back_button, self.forward_button, self.home_button):
            bar.addWidget(button)
        bar.addStretch(1)

        self.contents = QListWidget()
        self.contents.setAccessibleName("Documentation contents")
        self.browser = DocBrowser()
        self.browser.setAccessibleName("Documentation page")
        splitter = QSplitter()
        splitter.addWidget(self.contents)
        splitter.addWidget(self.browser)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([250, 650])
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.note_label)
        layout.addWidget(splitter, 1)
        self.resize(940, 700)

        self.back_button.clicked.connect(self.browser.backward)
        self.forward_button.clicked.connect(self.browser.forward)
        self.home_button.clicked.connect(lambda: self.open_doc(HOME_DOC))
        self.browser.backwardAvailable.connect(self.back_button.setEnabled)
        self.browser.forwardAvailable.connect(self.forward_button.setEnabled)
        self.browser.sourceChanged.connect(self._select_in_contents)
        self.browser.noted.connect(self.show_note)
        self.contents.currentItemChanged.connect(self._open_item)
        self.back_button.setEnabled(False)
        self.forward_button.setEnabled(False)
        self._fill_contents()

    def _fill_contents(self) -> None:
        if self.folder is None:
            self.browser.setMarkdown(f"# Documentation\n\n{missing_docs_message()}\n")
            for button in (self.back_button, self.forward_button, self.home_button):
                button.setEnabled(False)
            return
        docs = sorted(self.folder.glob("*.md"), key=lambda p: (
            READING_ORDER.index(p.name) if p.name in READING_ORDER else len(READING_ORDER), doc_title(p)))
        for path in docs:
            item = QListWidgetItem(doc_title(path), self.contents)
            item.setData(DOC_ROLE, path.name)
            item.setToolTip(path.name)

    def open_doc(self, target: str) -> bool:
        """Show ``target`` ("file.md" or "file.md#heading"); False (with a note) when it is not there."""
        if self.folder is None:
            self.show_note(missing_docs_message())
            return False
        name, _, fragment = target.partition("#")
        path = self.folder / name
        if not path.is_file():
            self.show_note(f"{name} is not in the installed documentation ({self.folder}).")
            return False
        url = QUrl.fromLocalFile(str(path))
        if fragment:
            url.setFragment(fragment)
        self.show_note("")
        self.browser.setSource(url)
        return True

    def current_doc(self) -> str:
        """"file.md" or "file.md#heading" of the page shown ("" before any)."""
        source = self.browser.source()
        if source.isEmpty():
            return ""
        name = Path(source.toLocalFile()).name
        return f"{name}#{source.fragment()}" if source.hasFragment() else name

    def show_note(self, text: str) -> None:
        self.note_label.setText(text)
        self.note_label.setVisible(bool(text))

    def _select_in_contents(self, url: QUrl) -> None:
        name = Path(url.toLocalFile()).name
        for row in range(self.contents.count()):
            item = self.contents.item(row)
            if item.data(DOC_ROLE) == name:
                if self.contents.currentItem() is not item:
                    self.contents.blockSignals(True)
                    self.contents.setCurrentItem(item)
                    self.contents.blockSignals(False)
                return

    def _open_item(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.open_doc(item.data(DOC_ROLE))
