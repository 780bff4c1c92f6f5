"""Step 3: the Jetson (or TensorRT) the model is for, the engine's precision, and where the bundle goes.

Shown when the Jetson bundle or a TensorRT engine is ticked. "Deploy to" lists
the hosts whose role is jetson (``hosts.list``), with what their last probe found.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QDoubleSpinBox, QFormLayout, QLineEdit, QWidget

from app.pages.export.form import FormStep, combo, spin
from app.pages.export.plan import (
    TARGET_TITLES,
    default_options,
    host_label,
    is_llm_choice,
    jetson_hosts,
)
from app.widgets.common import card, label
from app.widgets.wizard_frame import step_column
from app.widgets.wizard_parts import show_text, step_header

BUNDLE_ONLY = "Save the bundle only (folder and .tar.gz)"
INT8_TIP = ("int8 needs a QDQ model, i.e. a static int8 variant in TensorRT form (Compress › Static int8 "
            "with the TensorRT / Jetson int8 form); ONNX Runtime's dynamic int8 operators are not TensorRT's.")


class TargetStep(FormStep):
    title = "Target"
    prefixes = ("precision", "target", "jetpack", "tensorrt_version", "host", "workspace_mb", "dla_core",
                "archive", "benchmark_s")

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._hosts: list[dict[str, Any]] = []
        outer = step_column(self, step_header("Target",
                                              "The Jetson the bundle is for and how its TensorRT engine is built. "
                                              "Engines are built on the device itself: one only runs on the GPU and "
                                              "TensorRT version it was built with."))
        self.not_needed = label("Only a Jetson bundle or a TensorRT engine needs a target: tick one of them "
                                "on Formats to set it here.", "muted", wrap=True)
        outer.addWidget(self.not_needed)
        frame, box = card()
        self.frame = frame
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        box.addLayout(form)
        self.add_field(form, "target", "Jetson model",
                       combo([(title, key) for key, title in TARGET_TITLES.items()],
                             "sets the expected JetPack, TensorRT and CUDA versions, and what the DLA can do"))
        jetpack = QLineEdit()
        jetpack.setPlaceholderText("such as 6.1 (empty: newest)")
        jetpack.setToolTip("The JetPack on the device, such as 6.1 (empty: the target's newest; with a host, "
                           "what it reports)")
        jetpack.setMinimumWidth(220)
        self.add_field(form, "jetpack", "JetPack", jetpack)
        precision = combo([("fp32", "fp32"), ("fp16", "fp16"), ("int8", "int8")],
                          "the TensorRT engine's precision")
        precision.setItemData(2, INT8_TIP, 3)  # Qt.ToolTipRole: the int8 entry explains itself
        self.add_field(form, "precision", "Precision", precision)
        self.add_field(form, "dla_core", "DLA core",
                       combo([("none (GPU only)", None), ("0", 0), ("1", 1)],
                             "build for a deep-learning accelerator core, with GPU fallback "
                             "(Xavier and Orin AGX / NX have them; Orin Nano and Nano do not)"))
        self.add_field(form, "workspace_mb", "Workspace (MB)",
                       spin(16, 1_048_576, "memory TensorRT's builder may use for tactics"))
        self.add_field(form, "host", "Deploy to",
                       combo([(BUNDLE_ONLY, None)], "a Jetson from Hosts (role jetson): upload the bundle, "
                                                   "build and benchmark the engine there"))
        bench = QDoubleSpinBox()
        bench.setRange(0.0, 600.0)
        bench.setDecimals(1)
        bench.setSuffix(" s")
        bench.setToolTip("how long trtexec benchmarks the engine on the device")
        self.add_field(form, "benchmark_s", "Benchmark for", bench)
        self.hosts_note = label("", "muted", wrap=True)
        box.addWidget(self.hosts_note)
        box.addWidget(self.general_message)
        outer.addWidget(frame)
        outer.addStretch(1)
        self._form = form
        self.load(default_options())
        self.set_hosts([])
        self.set_formats(["onnx"])

    def set_hosts(self, hosts: list[dict[str, Any]]) -> None:
        """Offer the Jetson hosts of ``hosts`` (every host: those of another role are left out)."""
        self._hosts = jetson_hosts(hosts)
        box = self.fields["host"]
        chosen = box.currentData()
        self._loading = True
        box.clear()
        box.addItem(BUNDLE_ONLY, None)
        for host in self._hosts:
            box.addItem(host_label(host), host["name"])
        index = box.findData(chosen)
        box.setCurrentIndex(max(index, 0))
        self._loading = False
        show_text(self.hosts_note, "" if self._hosts else
                  "No Jetson hosts yet: add one on Hosts (role Jetson) to build and benchmark there.")
        if chosen is not None and index < 0:
            self.emit_changed()  # the chosen host is gone
        self._update_rows()

    def host_names(self) -> list[str]:
        box = self.fields["host"]
        return [box.itemData(i) for i in range(1, box.count())]

    def set_formats(self, formats: list[str]) -> None:
        """Show the form for a Jetson bundle or a TensorRT engine; only a bundle has a Jetson and a host."""
        self._formats = list(formats)
        needed = "jetson" in formats or "tensorrt" in formats
        self.frame.setVisible(needed)
        self.not_needed.setVisible(not needed)
        self._update_rows()

    def _update_rows(self) -> None:
        formats = getattr(self, "_formats", [])
        jetson = "jetson" in formats
        llm = is_llm_choice(formats)  # a GGUF file for llama.cpp: no TensorRT engine to build
        for key in ("target", "jetpack", "host"):
            self.fields[key].setEnabled(jetson)
        for key in ("precision", "dla_core", "workspace_mb", "tensorrt_version"):
            if key in self.fields:
                self.fields[key].setEnabled(not llm)
        self.fields["benchmark_s"].setEnabled(jetson and not llm and self.fields["host"].currentData() is not None)

    def emit_changed(self, *args: Any) -> None:
        self._update_rows()
        super().emit_changed(*args)
