"""A table column whose cells are picked from a list: the item holds the text, and a drop-down appears
only while the cell is edited (an item delegate).

Tables here never hold widgets in their cells (``setCellWidget``): such widgets live outside the view's
own bookkeeping, and one deleted with its Python wrapper while the view still lays it out crashes the
application (QAbstractItemView::updateEditorGeometries). A delegate's editor is made and destroyed by the
view itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QAbstractItemModel, QModelIndex, Qt
from PySide6.QtWidgets import QComboBox, QStyledItemDelegate, QStyleOptionViewItem, QWidget


class ChoiceDelegate(QStyledItemDelegate):
    def __init__(self, choices: Sequence[str], editable: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        self.choices = list(choices)
        self.editable = editable

    def createEditor(self, parent: QWidget, _option: QStyleOptionViewItem, _index: QModelIndex) -> QWidget:  # noqa: N802
        combo = QComboBox(parent)
        combo.setEditable(self.editable)
        combo.addItems(self.choices)
        combo.activated.connect(lambda _i, c=combo: self.commitData.emit(c))  # a pick applies at once
        return combo

    def setEditorData(self, editor: QWidget, index: QModelIndex) -> None:  # noqa: N802
        text = str(index.data(Qt.ItemDataRole.EditRole) or "")
        assert isinstance(editor, QComboBox)
        at = editor.findText(text)
        if at >= 0:
            editor.setCurrentIndex(at)
        elif self.editable:
            editor.setCurrentText(text)

    def setModelData(self, editor: QWidget, model: QAbstractItemModel, index: QModelIndex) -> None:  # noqa: N802
        assert isinstance(editor, QComboBox)
        model.setData(index, editor.currentText().strip(), Qt.ItemDataRole.EditRole)
