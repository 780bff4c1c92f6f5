"""Chat templates: how a conversation becomes the text a causal LM reads and learns to continue.

``data.chat_template`` picks one for a fine-tune: ``auto`` is the model's own template, or ``plain`` when
it has none; ``chatml``, ``llama3`` and ``plain`` replace the model's. ``plain`` is Ember's fallback
("### User:" headers, engine/tasks/causal_lm.py), ``chatml`` the format of Qwen and SmolLM
(<|im_start|>role ... <|im_end|>), ``llama3`` Llama 3's header tokens. A template whose special tokens the
tokenizer does not have still renders; those markers are then plain text to the model.

The choice is applied to the tokenizer once (``apply``), so training (causal_lm.encode), the generated
answers of the evaluation (lm_generate) and the Playground of the tuned run all render the same text.
"""

from __future__ import annotations

from typing import Any

CHOICES = ("auto", "chatml", "llama3", "plain")  # data.chat_template; auto: the model's own, else plain

# The fallback template as a Jinja chat template (HF renders with trim_blocks, so the
# newlines are string expressions, never literal text after a block tag).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if not loop.first %}{{ '\\n\\n' }}{% endif %}"
    "{{ '### ' + m['role'] | capitalize + ':\\n' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{% if messages %}{{ '\\n\\n' }}{% endif %}{{ '### Assistant:\\n' }}{% endif %}"
)

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
    """The Jinja source that ``name`` means for this tokenizer (model or auto: its own, else plain)."""
    if name in ("model", "auto"):
        return tokenizer.chat_template if has_template(tokenizer) else TEMPLATES["plain"]
    if name not in TEMPLATES:
        raise ValueError(f"unknown chat template {name!r}: use model, {', '.join(TEMPLATES)}")
    return TEMPLATES[name]


def apply(tokenizer: Any, name: str) -> Any:
    """Give the tokenizer the template ``name`` in place of its own (auto and model leave it as it is)."""
    if name not in ("model", "auto"):
        tokenizer.chat_template = template_text(tokenizer, name)
    return tokenizer


def used_name(model_has_template: bool, name: str) -> str:
    """What a fine-tune renders with: the chosen template, or for auto 'model' (its own) or 'plain'."""
    if name in ("model", "auto"):
        return "model" if model_has_template else "plain"
    return name


def render_prompt(tokenizer: Any, messages: list[dict[str, str]], name: str = "model") -> str:
    """The text a model continues to answer ``messages``: the template with the generation prompt."""
    return tokenizer.apply_chat_template(messages, chat_template=template_text(tokenizer, name), tokenize=False,
                                         add_generation_prompt=True)
