"""Ember Studio GUI: a Qt client of the engine (never imports torch)."""
