"""Compare: variants of a model side by side (not built yet)."""

from app.widgets.placeholder import PlaceholderPage


class ComparePage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "Compare",
            "Put runs and compressed variants side by side: accuracy, size, latency and "
            "memory, measured the same way on the same data, so choosing one is a matter of "
            "reading a table.",
            [
                "Select any runs and variants and see their metrics in one table and chart.",
                "Sort by the trade-off you care about (accuracy per MB, latency at batch 1).",
                "Open the winner in Export.",
            ],
            parent,
        )
