"""Export: package a model for a Jetson or a server (not built yet)."""

from app.widgets.placeholder import PlaceholderPage


class ExportPage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "Export",
            "Turn a model into something you can deploy: ONNX (optionally int8) for ONNX "
            "Runtime on a CPU or a Jetson, or a checkpoint for a GPU server. The export is "
            "checked against the original model before it is called done.",
            [
                "Pick a run or variant and a target (Jetson, CPU server, GPU server).",
                "Export, verify that the outputs match, and measure latency.",
                "Copy the result to one of your hosts, with instructions to run it there.",
            ],
            parent,
        )
