"""The Playground page: chat with a model or two, or classify text (page.py)."""

from app.pages.playground.page import PlaygroundPage

__all__ = ["PlaygroundPage"]
