"""Accessible names and keyboard reach for the widgets the pages build.

Screen readers announce a control by its accessible name. Qt finds one by itself
for a button (its text) and for a field whose label sits in the field's own
parent's QFormLayout; the pages here wrap most fields (a field and its message
under it), put labels above lists, or show only a placeholder or a tooltip, so
those fields would be announced as "edit" or "combo box". ``name_controls``
gives each such control the name a sighted user reads next to it, and its
tooltip as the accessible description.

Names set here are marked, so a later pass (the page shown again, a control
focused) refreshes them when the label they came from has changed; a name a
page sets itself is never touched.

``keyboard_friendly`` fixes what would trap or skip a Tab key: tables move
between cells with Tab (hundreds of presses to leave a run list), editable text
boxes take Tab as a character, and a label with links cannot be reached.

``install_accessibility(window)`` applies both to the main window now, to the
page shown whenever the page changes (pages and dialogs add widgets as data
arrives), and to the window of any control that gets focus without a name
(dialogs, wizards' later steps): cheap, and always before a screen reader asks.
"""

from __future__ import annotations

import re

from PySide6.QtCore import SIGNAL, QModelIndex, QObject, Qt, QTimer
from PySide6.QtGui import QTextDocumentFragment
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHeaderView,
    QLabel,
    QLayout,
    QLineEdit,
    QPlainTextEdit,
    QScrollArea,
    QScrollBar,
    QStackedWidget,
    QTabBar,
    QTabWidget,
    QTextEdit,
    QWidget,
)

from app.widgets import wheel_guard

AUTO_NAME = "emberAutoName"  # dynamic property: the name this module set (so it may refresh it)
AUTO_DESCRIPTION = "emberAutoDescription"
HEADING_ROLES = ("h1", "h2", "h3", "title")  # label roles (app.state.style) that title what follows them
MAX_NAME = 80
# Widgets that are parts of another control (a spin box's editor, a line edit's clear button).
_COMPOSITE = (QAbstractSpinBox, QComboBox, QLineEdit, QTabBar, QScrollBar)


# -- which widgets are controls -----------------------------------------------------------

_TAB = Qt.FocusPolicy.TabFocus.value


def is_part(widget: QWidget) -> bool:
    """Whether ``widget`` is an inner piece of another control rather than a control itself."""
    if widget.objectName().startswith("qt_"):
        return True  # Qt's own helpers: a table's corner button, a scroll area's viewport
    parent = widget.parentWidget()
    while parent is not None and not parent.isWindow():
        if isinstance(parent, _COMPOSITE) or parent.focusProxy() is widget:
            return True
        parent = parent.parentWidget()
    return False


def takes_tab_focus(widget: QWidget) -> bool:
    return bool(widget.focusPolicy().value & _TAB)


def controls(root: QWidget) -> list[QWidget]:
    """Every control in ``root``'s window under ``root`` (root included) that Tab can reach, shown or not."""
    window = root.window()
    found = [w for w in [root, *root.findChildren(QWidget)] if takes_tab_focus(w)]
    return [w for w in found if w.focusProxy() is None and not isinstance(w, (QScrollBar, QHeaderView))
            and w.window() is window and not is_part(w)]


def control_of(widget: QWidget | None) -> QWidget | None:
    """The control a focused widget belongs to (a spin box for its inner line edit)."""
    while widget is not None and not widget.isWindow() and is_part(widget):
        widget = widget.parentWidget()
    return widget


def reachable(widget: QWidget) -> bool:
    """Shown, enabled and taking Tab focus: what a keyboard user must be able to get to."""
    return widget.isVisible() and widget.isEnabled() and takes_tab_focus(widget)


# -- names ---------------------------------------------------------------------------------

def plain(text: str) -> str:
    """``text`` without markup, mnemonics ("&Open") or runs of whitespace."""
    if re.search(r"<[A-Za-z/!]", text):  # Qt.mightBeRichText's rule, near enough
        text = QTextDocumentFragment.fromHtml(text).toPlainText()
    text = re.sub(r"&(?!&)", "", text).replace("&&", "&")
    return " ".join(text.split())


def _short(text: str) -> str:
    """A name, not a paragraph: up to the first sentence's end, at most MAX_NAME characters."""
    text = plain(text).rstrip(":")
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    if match and len(match.group(1)) < len(text):
        text = match.group(1).rstrip(".")
    return text if len(text) <= MAX_NAME else text[:MAX_NAME - 1].rstrip() + "…"


def own_text(widget: QWidget) -> str:
    """The text a control shows about itself and Qt announces as its name ('' when it has none).

    A glyph alone ("✕", "⋯") says nothing to a listener, so it does not count.
    """
    if isinstance(widget, QAbstractButton):
        text = widget.text()
    elif isinstance(widget, QGroupBox):
        text = widget.title()
    elif isinstance(widget, QLabel):
        text = widget.text()
    else:
        return ""
    text = plain(text)
    return text if any(c.isalnum() for c in text) else ""


def accessible_name(widget: QWidget) -> str:
    """What a screen reader announces: the accessible name, else the control's own text."""
    return widget.accessibleName() or own_text(widget)


class _Labels:
    """Which label text belongs to which widget under ``root``: form rows and QLabel buddies."""

    def __init__(self, root: QWidget):
        self.by_widget: dict[QWidget, str] = {}
        forms = root.findChildren(QFormLayout)
        if isinstance(root.layout(), QFormLayout):
            forms.append(root.layout())
        for form in forms:
            for row in range(form.rowCount()):
                label_item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                field_item = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
                text = label_item.widget().text() if label_item and isinstance(label_item.widget(), QLabel) else ""
                if not plain(text) or field_item is None:
                    continue
                if field_item.widget() is not None:
                    self.by_widget.setdefault(field_item.widget(), text)
                elif field_item.layout() is not None:
                    for child in _layout_widgets(field_item.layout()):
                        self.by_widget.setdefault(child, text)
        for label in root.findChildren(QLabel):
            buddy = label.buddy()
            if buddy is not None and plain(label.text()):
                self.by_widget[buddy] = label.text()

    def label_for(self, widget: QWidget) -> str:
        """The form label or buddy of ``widget``, or of the container (up to two levels) it sits in."""
        for _ in range(3):
            if widget is None:
                return ""
            if widget in self.by_widget:
                return self.by_widget[widget]
            widget = widget.parentWidget()
        return ""


def _layout_widgets(layout: QLayout) -> list[QWidget]:
    """The widgets of ``layout`` and its nested layouts, in layout order (not inside the widgets)."""
    out: list[QWidget] = []
    for index in range(layout.count()):
        item = layout.itemAt(index)
        if item.widget() is not None:
            out.append(item.widget())
        elif item.layout() is not None:
            out.extend(_layout_widgets(item.layout()))
    return out


def _is_boundary(widget: QWidget) -> bool:
    """A page, a wizard step, a tab or a window: labels outside it do not describe what is inside."""
    return widget.isWindow() or isinstance(widget.parentWidget(), QStackedWidget)


def _siblings_before(widget: QWidget) -> list[QWidget]:
    """What ``widget``'s container lays out before it, nearest first."""
    parent = widget.parentWidget()
    if parent is None or parent.layout() is None:
        return []
    siblings = _layout_widgets(parent.layout())
    return list(reversed(siblings[:siblings.index(widget)])) if widget in siblings else []


def _has_text(label: QWidget) -> bool:
    return isinstance(label, QLabel) and not label.isHidden() and bool(plain(label.text()))


def _adjacent_label(widget: QWidget) -> str:
    """A short label laid out right before ``widget`` ("Priority" [spin box])."""
    before = [w for w in _siblings_before(widget) if not w.isHidden()]
    if before and _has_text(before[0]) and len(plain(before[0].text())) <= MAX_NAME:
        return before[0].text()
    return ""


def _label_before(widget: QWidget, headings_only: bool) -> str:
    """The nearest label laid out before ``widget``, in its container or up to three containers out."""
    current = widget
    for _ in range(4):
        for other in _siblings_before(current):
            if _has_text(other) and (not headings_only or other.property("role") in HEADING_ROLES):
                return other.text()
        if _is_boundary(current) or current.parentWidget() is None:
            return ""
        current = current.parentWidget()
    return ""


def _heading_inside(widget: QWidget) -> str:
    """A scroll area's first heading: it holds a page or a panel, and the heading names it."""
    if not isinstance(widget, QScrollArea) or widget.widget() is None:
        return ""
    heading = next((lab for lab in widget.widget().findChildren(QLabel)
                    if lab.property("role") in HEADING_ROLES and plain(lab.text())), None)
    return heading.text() if heading is not None else ""


def _tab_title(widget: QWidget) -> str:
    """The title of the tab ``widget`` is on, when it is the only thing that names it."""
    current = widget
    for _ in range(4):
        parent = current.parentWidget()
        if parent is None or current.isWindow():
            return ""
        tabs = parent.parentWidget()
        if isinstance(parent, QStackedWidget) and isinstance(tabs, QTabWidget):
            return tabs.tabText(tabs.indexOf(current))
        current = parent
    return ""


def _columns(widget: QWidget) -> str:
    """A table's column titles, when nothing else says what it lists."""
    model = widget.model() if isinstance(widget, QAbstractItemView) else None
    try:
        count = min(model.columnCount(QModelIndex()), 4) if model is not None else 0
    except TypeError:  # a list widget's model keeps columnCount to itself: one column anyway
        count = 0
    titles = [str(model.headerData(c, Qt.Orientation.Horizontal) or "") for c in range(count)] if count > 1 else []
    return "Table: " + ", ".join(t for t in titles if t) if any(titles) else ""


def _tab_bar_name(bar: QWidget) -> str:
    if not isinstance(bar, QTabBar):
        return ""
    tabs = [plain(bar.tabText(i)) for i in range(bar.count())]
    return "Tabs: " + ", ".join(t for t in tabs if t) if any(tabs) else ""


def _placeholder(widget: QWidget) -> str:
    if isinstance(widget, QComboBox):
        widget = widget.lineEdit()
    return widget.placeholderText() if isinstance(widget, (QLineEdit, QPlainTextEdit, QTextEdit)) else ""


def name_for(widget: QWidget, labels: _Labels) -> str:
    """The best name for ``widget``, from what a sighted user reads near it; '' when nothing says.

    In order: tab titles (a tab bar), its form label or buddy, placeholder, a short label right
    before it, its tooltip, the heading inside (a scroll area), the tab it is on, a heading
    before it, its column titles (a table), any label before it.
    """
    rules = (_tab_bar_name, labels.label_for, _placeholder, _adjacent_label, QWidget.toolTip,
             _heading_inside, _tab_title, lambda w: _label_before(w, headings_only=True), _columns,
             lambda w: _label_before(w, headings_only=False))
    for rule in rules:
        text = _short(rule(widget) or "")
        if text:
            return text
    return ""


def name_controls(root: QWidget) -> list[QWidget]:
    """Give every control under ``root`` without an accessible name one, and its tooltip as description.

    Returns the controls it could not name (nothing near them says what they are).
    """
    labels = _Labels(root)
    unnamed = []
    for widget in controls(root):
        _describe(widget)
        if own_text(widget) and not widget.property(AUTO_NAME):
            continue  # Qt announces the text itself, and follows it when it changes
        current = widget.accessibleName()
        if current and current != widget.property(AUTO_NAME):
            continue  # set by the page: it knows best
        name = name_for(widget, labels) or own_text(widget)
        if name != current:
            widget.setAccessibleName(name)
            widget.setProperty(AUTO_NAME, name)
        if not name:
            unnamed.append(widget)
    return unnamed


def _describe(widget: QWidget) -> None:
    description = plain(widget.toolTip())
    current = widget.accessibleDescription()
    if current and current != widget.property(AUTO_DESCRIPTION):
        return
    if description != current:
        widget.setAccessibleDescription(description)
        widget.setProperty(AUTO_DESCRIPTION, description)


# -- keyboard ------------------------------------------------------------------------------

def keyboard_friendly(root: QWidget) -> None:
    """Make the controls under ``root`` leavable with Tab, and links reachable with it."""
    for view in root.findChildren(QAbstractItemView):
        view.setTabKeyNavigation(False)  # arrows move between cells; Tab moves on
    for edit in [*root.findChildren(QPlainTextEdit), *root.findChildren(QTextEdit)]:
        edit.setTabChangesFocus(True)  # YAML and logs: Tab leaves, it never types a Tab character
    for label in root.findChildren(QLabel):
        if label.receivers(SIGNAL("linkActivated(QString)")) > 0:
            label.setTextInteractionFlags(label.textInteractionFlags()
                                          | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
                                          | Qt.TextInteractionFlag.LinksAccessibleByMouse)


def make_accessible(root: QWidget) -> list[QWidget]:
    """``keyboard_friendly`` and ``name_controls`` on ``root``; returns the controls left unnamed."""
    keyboard_friendly(root)
    return name_controls(root)


def _scope(widget: QWidget) -> QWidget:
    """Enough of ``widget``'s surroundings to hold its label: three containers out, within its page."""
    for _ in range(3):
        if _is_boundary(widget) or widget.parentWidget() is None:
            break
        widget = widget.parentWidget()
    return widget


class _Watcher(QObject):
    """Names what appears later: the page shown (after it fills in), and a control focused without a name."""

    def __init__(self, window: QWidget):
        super().__init__(window)
        self._window = window
        self._pending = False
        stack = getattr(window, "stack", None)
        if stack is not None:
            stack.currentChanged.connect(self._soon)
        app = QApplication.instance()
        if app is not None:
            app.focusChanged.connect(self._on_focus)

    def _soon(self, *_args) -> None:
        if not self._pending:
            self._pending = True
            QTimer.singleShot(0, self, self._run)

    def _run(self) -> None:
        self._pending = False
        page = self._window.stack.currentWidget()
        if page is not None:
            make_accessible(page)

    def _on_focus(self, _old: QWidget | None, new: QWidget | None) -> None:
        control = control_of(new)
        if control is None or (accessible_name(control) and not control.property(AUTO_NAME)):
            return
        scope = _scope(control)  # a dialog's field, a row added since: name it and its neighbours
        keyboard_friendly(scope)
        name_controls(scope)


def install_accessibility(window: QWidget) -> None:
    """Apply ``make_accessible`` to ``window`` now and keep it applied as pages and dialogs change."""
    wheel_guard.install()  # scrolling a form never changes a drop-down or spin box under the pointer
    make_accessible(window)
    window.accessibility_watcher = _Watcher(window)
