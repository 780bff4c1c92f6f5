"""A model folder's chat template, rendered without loading its tokenizer: for the wizard's data preview.

Loading a tokenizer through transformers imports torch, seconds on every look at the data; rendering a
template needs neither torch nor the vocabulary. ``FolderTemplate`` reads the template
(``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``) and the special tokens
from the folder's files and renders with transformers' own Jinja renderer (the sandbox, filters and
globals every chat template expects), so the text is what the tokenizer would render. It has the
attributes and the method ``causal_lm.render`` uses; anything it cannot read is an error, and the
caller loads the real tokenizer instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.tasks import chat_templates

SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def _token(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<s>", "lstrip": false, ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc if isinstance(doc, dict) else {}


def _own_template(folder: Path, config: dict[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    found = config.get("chat_template")
    if isinstance(found, list):  # named templates: the default one
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    return found if isinstance(found, str) and found else None


class FolderTemplate:
    """The chat template ``name`` (data.chat_template) of a model folder, with its special tokens."""

    def __init__(self, folder: Path, name: str = "auto"):
        config = _read_json(folder / "tokenizer_config.json")
        tokens = _read_json(folder / "special_tokens_map.json")
        self.special = {k: _token(config.get(k)) or _token(tokens.get(k)) for k in SPECIAL}
        self.bos_token, self.eos_token = self.special["bos_token"], self.special["eos_token"]
        self.chat_template = _own_template(folder, config)
        self.model_has_chat_template = bool(self.chat_template)
        chat_templates.apply(self, name)

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = False, chat_template: str | None = None) -> str:
        from transformers.utils.chat_template_utils import render_jinja_template

        template = chat_template or self.chat_template
        if not template:
            raise ValueError("no chat template")
        rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                            add_generation_prompt=add_generation_prompt,
                                            **{k: v for k, v in self.special.items() if v is not None})
        return rendered[0]
