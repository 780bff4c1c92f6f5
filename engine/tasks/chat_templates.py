"""Chat templates a user can pick when a model has none, or to override its own.

``plain`` is Ember's fallback (engine/tasks/causal_lm.py: "### User:" headers), ``chatml`` the format of
Qwen and SmolLM (<|im_start|>role ... <|im_end|>), ``llama3`` Llama 3's header tokens. A template whose
special tokens the tokenizer does not have still renders; those markers are then plain text to the model.
"""

from __future__ import annotations

from typing import Any

from engine.tasks.causal_lm import CHAT_TEMPLATE

TEMPLATES = {
    "chatml": ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "llama3": ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n'"
               " + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"),
    "plain": CHAT_TEMPLATE,
}


def has_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def template_text(tokenizer: Any, name: str = "model") -> str:
    """The Jinja source that ``name`` means for this tokenizer (model: its own, else plain)."""
    if name == "model":
        return tokenizer.chat_template if has_template(tokenizer) else TEMPLATES["plain"]
    if name not in TEMPLATES:
        raise ValueError(f"unknown chat template {name!r}: use model, {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


def render_prompt(tokenizer: Any, messages: list[dict[str, str]], name: str = "model") -> str:
    """The text a model continues to answer ``messages``: the template with the generation prompt."""
    return tokenizer.apply_chat_template(messages, chat_template=template_text(tokenizer, name), tokenize=False,
                                         add_generation_prompt=True)
