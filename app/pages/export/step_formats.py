"""Step 2: the formats to write (a checkbox and one sentence each) and how the model is exported and checked."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QCheckBox, QFormLayout, QLineEdit, QWidget

from app.pages.export.form import ChoiceRow, FormStep, combo, spin
from app.pages.export.plan import (
    FORMAT_INFO,
    GENAI_PRECISIONS,
    GGUF_TYPES,
    LLM_FORMATS,
    default_formats,
    default_options,
    is_llm_choice,
    onnx_only,
    shown_formats,
    source_task,
    unavailable_reason,
)
from app.text.glossary import option_tooltip
from app.widgets.check_list import CheckList
from app.widgets.common import card, label, show_text
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import step_header

VARIANT_AXES = ("Fixed for a quantized variant: the compression job wrote its model with dynamic axes (batch, and "
                "sequence for text)")
VARIANT_NOTE = ("This quantized variant's model.onnx was written by the compression job. The export converts it to "
                "the ONNX opset chosen above (ONNX's version converter) and stops with the reason if it cannot; its "
                "dynamic axes stay as they are, and Slim does not apply.")
DEFAULT_TIPS = {"dynamic_batch": "Off: the batch size is fixed to the example's",
                "slim": "Constant folding and fusions; the parity check runs on the simplified model"}


class FormatsStep(FormStep):
    title = "Formats"
    prefixes = ("formats", "opset", "dynamic_batch", "dynamic_sequence", "max_batch", "opt_batch", "seq_len",
                "slim", "torchscript_mode", "parity_samples", "tolerance", "gguf_types", "genai_precisions", "adapter",
                "check_prompts", "check_batch")

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = step_column(self, step_header("Formats",
                                              "Tick every format you need; each is written into the run's export/ "
                                              "folder and reloaded in a fresh process to check it against the model."))
        frame, box = card()
        self.check_list = CheckList(spacing=(24, 10, 2))
        for key, (title, text) in FORMAT_INFO.items():
            self.check_list.add(key, f"{title}  ({key})", [(text, "muted")])
        self.check_list.toggled.connect(self.emit_changed)
        self.format_checks = self.check_list.checks
        self.reasons = self.check_list.reasons
        box.addWidget(self.check_list)
        box.addWidget(self.message_for("formats"))
        outer.addWidget(frame)

        frame, box = card()
        self.options_card = frame  # the ONNX, TorchScript and TensorRT options: hidden for language-model formats alone
        box.addWidget(label("Options", "h2"))
        box.addWidget(label("The defaults suit most models; the engine checks every value as you change it.",
                            "muted", wrap=True))
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        box.addLayout(form)
        self.add_field(form, "opset", "ONNX opset",
                       spin(13, 23, "18 suits current TensorRT and ONNX Runtime; TensorRT on older JetPacks "
                                    "reads only older opsets (the compatibility check says so)"))
        dynamic = QCheckBox("Any batch size at run time")
        dynamic.setToolTip(DEFAULT_TIPS["dynamic_batch"])
        self.add_field(form, "dynamic_batch", "Dynamic batch", dynamic)
        sequence = QCheckBox("Any sequence length up to the run's max_length")
        sequence.setToolTip("Text models only: a dynamic sequence axis")
        self.add_field(form, "dynamic_sequence", "Dynamic sequence", sequence)
        self.add_field(form, "max_batch", "Max batch",
                       spin(1, 4096, "largest batch: the TensorRT profile's max and Triton's max_batch_size"))
        self.add_field(form, "opt_batch", "Opt batch", spin(1, 4096, "the batch TensorRT tunes for"))
        slim = QCheckBox("Simplify the graph with onnxslim")
        slim.setToolTip(DEFAULT_TIPS["slim"])
        self.add_field(form, "slim", "Slim", slim)
        self.add_field(form, "torchscript_mode", "TorchScript mode",
                       combo([("trace (runs the model on an example)", "trace"),
                              ("script (compiles the Python code)", "script")],
                             "trace follows one example's path; script keeps control flow"))
        self.add_field(form, "parity_samples", "Parity samples",
                       spin(1, 100_000, "validation examples every format is checked on"))
        self.add_field(form, "tolerance", "Tolerance", QLineEdit())
        self.fields["tolerance"].setToolTip("largest absolute logit difference allowed for fp32 formats")
        self.fields["tolerance"].setMaximumWidth(140)
        self._options_form = form
        self.variant_note = label("", "muted", wrap=True)  # what the options do to a quantized variant's ONNX
        self.variant_note.hide()
        box.addWidget(self.variant_note)
        outer.addWidget(frame)

        # A language model's formats: which files, and how many prompts each is checked on.
        self.llm_card, box = card()
        box.addWidget(label("Language model", "h2"))
        box.addWidget(label("Each file is run in its own runtime (transformers, llama.cpp, ONNX Runtime GenAI) and "
                            "answers the first validation prompts greedily beside the source model.", "muted", wrap=True))
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        box.addLayout(form)
        self.add_field(form, "gguf_types", "GGUF types",
                       ChoiceRow(GGUF_TYPES, "f16/bf16: full precision (the converter's own); q8_0, q5_k_m, q4_k_m, "
                                             "q4_0: llama.cpp's quantizer (smaller, a little less accurate)"))
        self.add_field(form, "genai_precisions", "ONNX-GenAI",
                       ChoiceRow(GENAI_PRECISIONS, "fp32: the same answers as PyTorch; int4: weight-only, about a "
                                                   "quarter of the size"))
        self.add_field(form, "adapter", "LoRA adapter",
                       combo([("merged into the weights", "merge"), ("kept separate (adapter folder)", "separate")],
                             "A LoRA run's merged checkpoint, or its adapter alone beside the base model"))
        self.add_field(form, "check_prompts", "Check prompts",
                       spin(1, 1000, "validation prompts every file answers greedily, compared with the source model"))
        self.add_field(form, "check_batch", "Requests at once",
                       spin(0, 64, "tokens/s with this many requests batched together in each file's runtime, beside "
                                   "one at a time (0: skip)"))
        outer.addWidget(self.llm_card)
        outer.addWidget(self.general_message)
        outer.addStretch(1)
        options = default_options()
        self.load(options)
        self.set_formats(options["formats"])
        self.set_source(None)

    def set_formats(self, formats: list[str]) -> None:
        self._loading = True
        for key, check in self.format_checks.items():
            check.setChecked(key in formats and check.isEnabled())
        self._loading = False
        self._update_rows()

    def set_source(self, record: dict[str, Any] | None, task: str = "") -> None:
        """Show the formats of ``record``'s kind of model, ticking its defaults when none of the ticks apply;
        enable what applies to ``record``; say why the rest does not (and untick it)."""
        task = task or source_task(record)
        ticked = [k for k, c in self.format_checks.items() if c.isChecked()]
        self.check_list.show_only(shown_formats(task))
        for key in self.format_checks:
            self.check_list.set_reason(key, unavailable_reason(key, record),
                                       tip=option_tooltip(key, FORMAT_INFO[key][1]))
        self.set_formats(default_formats(task, ticked))
        text = task in ("", "text_classification", "causal_lm")
        variant = onnx_only(record)
        sequence = self.fields["dynamic_sequence"]
        sequence.setEnabled(text and not variant)
        sequence.setToolTip(VARIANT_AXES if variant else "Text models only: a dynamic sequence axis" if text
                            else f"Only text models have a sequence axis; this is a {task.replace('_', ' ')} model.")
        # A quantized variant's model.onnx is used as the compression job wrote it (dynamic axes, not slimmed):
        # those choices are shown as applied and not offered; its opset is converted to the one chosen.
        self._loading = True
        for key, applied, tip in (("dynamic_batch", True, VARIANT_AXES), ("dynamic_sequence", True, VARIANT_AXES),
                                  ("slim", False, "Not for a quantized variant: its model.onnx is kept as the "
                                                  "compression job wrote it")):
            widget = self.fields[key]
            if variant:
                widget.setChecked(applied)
                widget.setToolTip(tip)
            elif key != "dynamic_sequence":
                widget.setToolTip(DEFAULT_TIPS[key])
            if key != "dynamic_sequence":
                widget.setEnabled(not variant)
        self._loading = False
        show_text(self.variant_note, VARIANT_NOTE if variant else "")
        self._update_rows()

    def _update_rows(self) -> None:
        mode = self.fields["torchscript_mode"]
        mode.setEnabled(self.format_checks["torchscript"].isChecked())
        ticked = set(self.checked())
        self.llm_card.setVisible(bool(ticked & set(LLM_FORMATS)))
        self.options_card.setVisible(not is_llm_choice(sorted(ticked)))  # ONNX options: not for a GGUF's bundle
        self.fields["gguf_types"].setEnabled("gguf" in ticked)
        self.fields["genai_precisions"].setEnabled("onnx_genai" in ticked)
        self.fields["adapter"].setEnabled("hf" in ticked)

    def emit_changed(self, *args: Any) -> None:
        self._update_rows()
        super().emit_changed(*args)

    def checked(self) -> list[str]:
        return self.check_list.checked()

    def values(self) -> dict[str, Any]:
        return {**super().values(), "formats": self.checked()}

    def blocking(self) -> list[str]:
        return [] if self.checked() else ["tick at least one format"]
