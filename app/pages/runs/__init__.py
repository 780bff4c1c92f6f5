"""Runs: every job in a table, its details, the queue and a model's lineage."""

from app.pages.runs.page import RunsPage

__all__ = ["RunsPage"]
