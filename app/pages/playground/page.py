"""Playground: chat with a model (or two side by side), or classify text, before exporting it.

The models come from the window's JobsState (finished fine-tunes and variants of language models and classifiers), the
built-ins, ``models.list`` (the Hugging Face cache) and folders the user browses to (choices.py). A chat
answer streams from ``playground.chat`` (stream.py); side by side, one prompt goes to both models at once
and each column keeps its own conversation. A classifier shows every class's probability for the
fine-tune and each of its variants (classify.py). The settings come with their bounds from
engine.api.playground.GenerateSettings (settings_form.py); loaded models and Unload are loaded.py.
Other pages open it on a run with ``nav.show("playground", run_id=...)``. docs/playground.md.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QMenu,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.connection.engine_process import EngineProcess
from app.pages.playground import choices as ch
from app.pages.playground.chat_panel import ChatPanel
from app.pages.playground.classify import ClassifyView
from app.pages.playground.loaded import LoadedModels
from app.pages.playground.picker import ModelPicker
from app.pages.playground.saved import SavedChats
from app.pages.playground.serving import ServeBar
from app.pages.playground.settings_form import SettingsForm
from app.state.navigation import Navigator
from app.widgets.common import card, label, show_text
from engine.api.job_terms import SUCCEEDED
from engine.api.playground import GenerateSettings

REBUILD_MS = 200  # jobs events come in bursts: rebuild the lists once after them
SIDE_WIDTH = 270


class PlaygroundPage(QWidget):
    title = "Playground"

    def __init__(self, engine: EngineProcess, parent: QWidget | None = None, nav: Navigator | None = None):
        super().__init__(parent)
        self.nav = nav or Navigator(self)
        self._client = engine.client
        self.jobs = engine.jobs
        self._hub: list[ch.Choice] = []
        self._pending_ref: dict[str, Any] | None = None  # navigate() before the lists were read
        self._b_by_user = False  # the second model was picked by hand: keep it when the first changes
        self._greedy_for_side = False  # Side by side set the temperature to 0 (it puts the default back)
        self._variants_of: str | None = None

        outer = QVBoxLayout(self)
        outer.setContentsMargins(28, 24, 28, 16)
        outer.setSpacing(10)
        header = QHBoxLayout()
        titles = QVBoxLayout()
        titles.addWidget(label("Playground", "h1"))
        titles.addWidget(label("Try a model: chat with a language model, or see a classifier's answer. Side by "
                               "side puts a fine-tune beside the model it started from.", "muted", wrap=True))
        header.addLayout(titles, 1)
        self.side_check = QCheckBox("Side by side")
        self.side_check.setToolTip("Two models, one prompt: each answers in its own column")
        self.side_check.toggled.connect(self._side_toggled)
        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip("Clear the conversation (an answer still coming is stopped)")
        self.new_button.clicked.connect(lambda: self.chat.new_chat())
        self.export_button = QPushButton("Export chat…")  # not the model: that is the Export page
        self.export_button.setToolTip("Save the conversation as JSON Lines: one line per conversation with its "
                                      "messages, model and settings")
        self.export_button.clicked.connect(lambda: self.chat.export_clicked())
        self.saved_button = QPushButton("Saved chats…")
        self.saved_button.setToolTip("Every chat is kept after each answer: open one again, or delete it")
        self.saved_button.clicked.connect(self.show_saved)
        self.saved_dialog: SavedChats | None = None
        self.serve_button = QPushButton("Serve…")
        self.serve_button.setToolTip("Serve this model behind an OpenAI-compatible endpoint on 127.0.0.1 "
                                     "(docs/serve.md), until you stop it; a folder or file may go to an SSH host")
        self.serve_button.clicked.connect(self.serve)
        for widget in (self.side_check, self.new_button, self.saved_button, self.export_button, self.serve_button):
            header.addWidget(widget, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addLayout(header)
        self.serve_bar = ServeBar(self._client, self.jobs)
        self.serve_bar.changed.connect(self._update)
        outer.addWidget(self.serve_bar)

        # The main area: pickers, then the conversations (or the classifier), then the prompt.
        main = QWidget()
        column = QVBoxLayout(main)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(8)
        pickers = QHBoxLayout()
        self.picker_a, self.picker_b = ModelPicker("A"), ModelPicker("B")
        for picker in (self.picker_a, self.picker_b):  # Browse › Served endpoint starts from the one served here
            picker.served = self._served
            self.serve_bar.ended.connect(picker.forget_endpoint)  # and an endpoint that stopped leaves the list
        self.picker_b_box = QWidget()
        for picker, box, title in ((self.picker_a, QWidget(), "Model"), (self.picker_b, self.picker_b_box,
                                                                         "Beside it")):
            inner = QVBoxLayout(box)
            inner.setContentsMargins(0, 0, 0, 0)
            inner.setSpacing(2)
            inner.addWidget(label(title, "muted"))
            inner.addWidget(picker)
            pickers.addWidget(box, 1)
        column.addLayout(pickers)
        self.picker_a.changed.connect(self._picked_a)
        self.picker_b.changed.connect(self._picked_b)
        self.picker_b.chosen.connect(lambda _choice: setattr(self, "_b_by_user", True))

        self.settings = SettingsForm()
        self.chat = ChatPanel(self._client, self.settings)
        self.chat.state_changed.connect(self._update)
        self.chat.answered.connect(self._answered)
        # What tests and scripts reach for, by their plain names.
        self.column_a, self.column_b, self.prompt = self.chat.column_a, self.chat.column_b, self.chat.prompt
        self.prompt_row, self.send_button, self.stop_button = (self.chat.prompt_row, self.chat.send_button,
                                                                self.chat.stop_button)
        self.classify_view = ClassifyView(self._client)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.chat)
        self.stack.addWidget(self.classify_view)
        column.addWidget(self.stack, 1)
        self.message = label("", "error", wrap=True)
        self.message.hide()
        column.addWidget(self.message)

        # The side: generation settings and the loaded models.
        side_body = QWidget()
        side_body.setObjectName("pageBody")
        side = QVBoxLayout(side_body)
        side.setContentsMargins(0, 0, 4, 0)
        side.setSpacing(12)
        self.settings_card, box = card()
        box.addWidget(label("Settings", "h2"))
        self.settings.changed.connect(self.chat.update_buttons)
        box.addWidget(self.settings)
        side.addWidget(self.settings_card)
        frame, box = card()
        box.addWidget(label("Loaded models", "h2"))
        self.loaded = LoadedModels(self._client, self.title_for)
        box.addWidget(self.loaded)
        side.addWidget(frame)
        side.addStretch(1)
        side_scroll = QScrollArea()
        side_scroll.setObjectName("pageScroll")
        side_scroll.setWidgetResizable(True)
        side_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        side_scroll.setWidget(side_body)
        side_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # As wide as the settings need, and the scroll bar beside them: the side never scrolls sideways.
        side_scroll.setMinimumWidth(side_body.minimumSizeHint().width()
                                    + side_scroll.verticalScrollBar().sizeHint().width() + 2)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(main)
        splitter.addWidget(side_scroll)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 0)
        splitter.setSizes([700, SIDE_WIDTH])
        splitter.setChildrenCollapsible(False)
        outer.addWidget(splitter, 1)

        self._rebuild_timer = QTimer(self, singleShot=True, interval=REBUILD_MS)
        self._rebuild_timer.timeout.connect(self.rebuild)
        self.jobs.jobs_reset.connect(self.rebuild)
        for signal in (self.jobs.job_changed, self.jobs.job_removed):
            signal.connect(lambda *_: self._rebuild_timer.start())
        self._client.connected.connect(lambda *_: self.read_cache())
        self.rebuild()
        if self._client.is_connected:
            self.read_cache()
        self._show_side_by_side(False)

    # -- the lists of models ---------------------------------------------------------------------

    def read_cache(self) -> None:
        """The Hugging Face cache's models (models.list); a failure leaves the other choices."""
        self._client.request("models.list", {}, self._got_cache, lambda _err: None)

    def _got_cache(self, reply: dict[str, Any]) -> None:
        self._hub = ch.hub_choices(reply)
        self.rebuild()

    def all_choices(self) -> list[ch.Choice]:
        return ch.job_choices(self.jobs.all(), self.jobs.get) + ch.builtin_choices() + self._hub

    def title_for(self, ref: dict[str, Any]) -> str:
        """What the pickers call the model ``ref`` names ('' when they do not list it)."""
        try:
            key = ch.ref_key(ref)
        except ValueError:
            return ""
        return next((c.title for c in self.picker_a.choices() + self.picker_b.choices() if c.key == key), "")

    def rebuild(self) -> None:
        choices = self.all_choices()
        self.picker_a.set_choices(choices)
        self.picker_b.set_choices([c for c in choices if c.kind == ch.CHAT])
        if self._pending_ref is not None and self.jobs.loaded:
            ref, self._pending_ref = self._pending_ref, None
            self._open(ref)
        self._refresh_variants()
        if self.jobs.loaded:
            self.serve_bar.adopt(self.jobs.all())
        self.chat.update_buttons()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if self._client.is_connected:
            self.read_cache()  # a model downloaded on the Models page since
            self.loaded.reload()

    # -- opened from another page -------------------------------------------------------------

    def navigate(self, job_id: str | None = None, model: dict[str, Any] | None = None,
                 side_by_side: bool | None = None) -> None:
        """Open on a finished run (``run_id``) or any ModelRef (``model``); ``side_by_side`` sets the toggle."""
        ref = model or ({"run": job_id} if job_id else None)
        if side_by_side is not None:
            self.side_check.setChecked(side_by_side and not self._is_classifier())
        if ref is not None and ref.get("run") and not self.jobs.loaded:
            self._pending_ref = ref  # the jobs are not read yet: open it once they are
        elif ref is not None:
            self._open(ref)

    def _open(self, ref: dict[str, Any]) -> bool:
        if not self.picker_a.select(ref) and ref.get("run"):
            self._rebuild_timer.stop()
            self.rebuild()  # a run that finished a moment ago may not be listed yet
        if self.picker_a.select(ref):
            show_text(self.message, "")
            return True
        if ref.get("path"):
            self.picker_a.add_folder(str(ref["path"]))
            return True
        show_text(self.message, f"{ch.ref_label(ref)} is not a finished model the Playground can open.")
        return False

    # -- picking --------------------------------------------------------------------------------

    def _is_classifier(self) -> bool:
        choice = self.picker_a.current()
        return choice is not None and choice.kind == ch.CLASSIFY

    def _picked_a(self, choice: ch.Choice | None) -> None:
        self.column_a.set_model(choice.ref if choice else None, choice.title if choice else "")
        classify = self._is_classifier()
        self.stack.setCurrentWidget(self.classify_view if classify else self.stack.widget(0))
        self.settings_card.setVisible(not classify)
        for widget in (self.side_check, self.new_button, self.saved_button, self.export_button):
            widget.setVisible(not classify)  # chat only
        if classify:
            self._refresh_variants()
        elif self.side_check.isChecked() and not self._b_by_user:
            self._default_b()
        self._show_side_by_side(self.side_check.isChecked())
        self.chat.update_buttons()

    def _picked_b(self, choice: ch.Choice | None) -> None:
        self.column_b.set_model(choice.ref if choice else None, choice.title if choice else "")
        self.chat.update_buttons()

    def _default_b(self) -> None:
        """Beside a fine-tune, the model it started from; beside anything else, another built-in."""
        a = self.picker_a.current()
        base = a.base if a else None
        found = bool(base) and self.picker_b.select(base)
        if not found and base and base.get("path"):
            found = bool(self.picker_b.add_folder(str(base["path"])))
        if not found:
            other = next((c for c in self.picker_b.choices() if a is None or c.key != a.key), None)
            if other is not None:
                self.picker_b.select(other.ref)
        current = self.picker_b.current()
        self.column_b.set_model(current.ref if current else None, current.title if current else "")

    def _served(self) -> list[tuple[str, str]]:
        bar = self.serve_bar
        return [(bar.url, bar.key_file)] if bar.serving and bar.url else []

    def _side_toggled(self, on: bool) -> None:
        # Side by side compares the models, not two draws: greedy answers (temperature 0) repeat, so the same
        # question gives the same comparison each time. Only the default is changed, and changed back.
        temperature = self.settings.spins["temperature"]
        default = GenerateSettings().temperature
        if on and temperature.value() == default:
            temperature.setValue(0.0)
            self._greedy_for_side = True
        elif not on and self._greedy_for_side and temperature.value() == 0.0:
            temperature.setValue(default)
        if not on:
            self._greedy_for_side = False
        if on and not self._b_by_user:
            self._default_b()
        self._show_side_by_side(on)
        self.chat.update_buttons()

    def _show_side_by_side(self, on: bool) -> None:
        self.picker_b_box.setVisible(on and not self._is_classifier())
        self.chat.set_side_by_side(on)

    # -- the classifier's variants -------------------------------------------------------------

    def _refresh_variants(self) -> None:
        """A classifier is shown with its fine-tune's finished variants (compress.variants)."""
        choice = self.picker_a.current()
        if choice is None or choice.kind != ch.CLASSIFY:
            self._variants_of = None
            return
        job = self.jobs.get(choice.ref.get("run"))
        root = ch.finetune_of(job, self.jobs.get) if job else None
        own = ch.job_choice(root, self.jobs.get) if root else None
        if root is None or own is None:
            self.classify_view.set_models([choice])
            return
        self._variants_of = root["id"]
        if choice.key not in {m.key for m in self.classify_view.models}:
            self.classify_view.set_models([own] if own.key == choice.key else [own, choice])

        def got(reply: dict[str, Any]) -> None:
            if self._variants_of != root["id"]:
                return
            found = [ch.job_choice(v.get("job") or {}, self.jobs.get) for v in reply.get("variants") or []
                     if (v.get("job") or {}).get("state") == SUCCEEDED]
            self.classify_view.set_models([own, *(c for c in found if c is not None)])

        self._client.request("compress.variants", {"id": root["id"]}, got, lambda _err: None)

    # -- chatting (chat_panel.py) ---------------------------------------------------------------

    def busy(self) -> bool:
        return self.chat.busy()

    def send(self) -> None:
        self.chat.send()

    def _answered(self, *_args: Any) -> None:
        self.loaded.reload()  # an answer ended: its worker's memory has changed

    # -- saved chats (saved.py; chat_panel.py saves) ----------------------------------------------

    def show_saved(self) -> None:
        if self.saved_dialog is None:
            self.saved_dialog = SavedChats(self._client, self)
            self.saved_dialog.opened.connect(self.open_conversation)
        self.saved_dialog.reload()
        self.saved_dialog.open()

    def open_conversation(self, reply: dict[str, Any]) -> None:
        """Show a saved chat (chats.get's reply): its models picked, its settings, every turn."""
        if self.busy():
            self.chat.stop()
        conversation = reply.get("conversation") or {}
        sides = list(conversation.get("sides") or [])[:2]
        if not sides:
            return
        self.side_check.setChecked(len(sides) == 2)
        missing = []
        for picker, column, side in zip((self.picker_a, self.picker_b), (self.column_a, self.column_b), sides,
                                        strict=False):
            ref = side.get("model") or {}
            found = picker.select(ref) or (bool(ref.get("path")) and bool(picker.add_folder(str(ref["path"]))))
            if not found:  # a run deleted since: the turns still show; a model must be picked to go on
                missing.append(side.get("title") or ch.ref_label(ref))
                column.set_model(None, "")
            column.model_title = side.get("title") or column.model_title
        if len(sides) == 2:
            self._b_by_user = True  # keep the chat's second model
        self.settings.set_settings(conversation.get("settings") or {})
        self.chat.load(conversation)
        show_text(self.message, "" if not missing else
                  f"{', '.join(missing)} is no longer here: pick a model to go on with this chat.")
        self._update()

    # -- serving (serving.py) -----------------------------------------------------------------------

    def serve(self) -> None:
        """Serve the picked model here; a folder or file may go to an SSH host instead (a menu of the hosts)."""
        choice = self.picker_a.current()
        if choice is None:
            return
        if not choice.ref.get("path"):  # a run, a built-in or a cached Hub model is served on this machine
            self._serve_on(choice, None)
            return
        self._client.request("hosts.list", {}, lambda reply: self.serve_menu(choice, reply.get("hosts") or []),
                             lambda _err: self._serve_on(choice, None))

    def serve_menu(self, choice: Any, hosts: list[dict[str, Any]]) -> QMenu | None:
        """Where to serve a folder or file: this machine or an SSH host (the model is copied there)."""
        names = [h["name"] for h in hosts if isinstance(h, dict) and h.get("name") and h.get("role") != "jetson"]
        if not names:
            self._serve_on(choice, None)
            return None
        menu = QMenu(self)
        menu.addAction("On this machine", lambda: self._serve_on(choice, None))
        for name in names:
            menu.addAction(f"On {name} (copied there; reached through SSH)", lambda n=name: self._serve_on(choice, n))
        self._serve_where = menu  # kept: a popup menu without an owner would be collected
        menu.popup(self.serve_button.mapToGlobal(self.serve_button.rect().bottomLeft()))
        return menu

    def _serve_on(self, choice: Any, host: str | None) -> None:
        self.serve_bar.start(choice.ref, choice.title, host)
        self._update()

    # -- buttons --------------------------------------------------------------------------------

    def _update(self, *_args: Any) -> None:
        busy = self.busy()
        classify = self._is_classifier()
        self.export_button.setEnabled(self.chat.has_conversation() and not classify)
        self.saved_button.setEnabled(self._client.is_connected and not busy)
        self.serve_button.setEnabled(self._client.is_connected and self.picker_a.current() is not None
                                     and not self.serve_bar.serving)
        self.new_button.setEnabled(not classify)
        self.side_check.setEnabled(not classify and not busy)
        self.picker_a.setEnabled(not busy)
        self.picker_b.setEnabled(not busy)
