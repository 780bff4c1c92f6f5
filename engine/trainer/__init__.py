"""The Trainer: the training loop every fine-tune and every training compression runs."""
