"""New fine-tune: the wizard that builds a training spec (not built yet)."""

from app.widgets.placeholder import PlaceholderPage


class NewFinetunePage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "New fine-tune",
            "A step-by-step wizard for fine-tuning a PyTorch model on this machine or on your "
            "GPU hosts. It writes the same YAML config you could run from the command line "
            "and shows it before anything starts.",
            [
                "Pick a model, a task and a dataset, and check a small sample of the data.",
                "Choose full fine-tuning or LoRA, and a strategy (single GPU, DDP, FSDP, DeepSpeed ZeRO).",
                "See the estimated memory per GPU before you start, with a fix when it will not fit.",
                "Start the run and follow it on the Monitor page.",
            ],
            parent,
        )
