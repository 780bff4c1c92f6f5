"""Compress: quantize, prune or distil a trained model (not built yet)."""

from app.widgets.placeholder import PlaceholderPage


class CompressPage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "Compress",
            "Make a trained model smaller and faster: int8 quantization, pruning, or "
            "distillation into a smaller student. Each variant is evaluated on the same data "
            "so you can see what it costs in accuracy.",
            [
                "Choose a trained run or checkpoint and one or more compression methods.",
                "Run them as jobs, each with its own log and progress.",
                "Send the results straight to Compare.",
            ],
            parent,
        )
