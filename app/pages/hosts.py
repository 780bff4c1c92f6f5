"""Hosts: the remote GPU machines Ember can use (not built yet)."""

from app.widgets.placeholder import PlaceholderPage


class HostsPage(PlaceholderPage):
    def __init__(self, engine, parent=None):
        super().__init__(
            "Hosts",
            "Add the machines you reach over SSH, and Ember can train on them as if they were "
            "this one: it probes their GPUs, copies the code and data, runs the job there and "
            "follows its progress.",
            [
                "Add a host by its SSH address and check that Ember can log in.",
                "See each host's GPUs, memory, disk and installed PyTorch.",
                "Choose hosts when you start a fine-tune, for one or several nodes.",
            ],
            parent,
        )
