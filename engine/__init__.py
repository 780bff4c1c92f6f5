"""Ember Studio engine: the headless process that runs and records every job."""

__version__ = "0.1.0"
