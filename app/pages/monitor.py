"""Monitor: live charts of a running job (not built yet)."""

from app.widgets.placeholder import PlaceholderPage


class MonitorPage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "Monitor",
            "Live charts of a training run as it happens: loss, learning rate, throughput and "
            "memory on every GPU. Closing Ember does not stop the run; when you come back the "
            "charts fill in from the stored history and carry on live.",
            [
                "Watch loss, evaluation metrics, samples per second and data-loader wait.",
                "See memory per rank and host, with the peak and a warning before it runs out.",
                "Stop a run gracefully, or cancel it at once.",
            ],
            parent,
        )
