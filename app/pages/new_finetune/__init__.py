"""New fine-tune: the wizard that builds a train.finetune spec, shows it, and launches it."""

from app.pages.new_finetune.page import NewFinetunePage

__all__ = ["NewFinetunePage"]
