"""Settings: the engine's facts, preferences, users and projects, and the audit log."""

from app.pages.settings.page import SettingsPage

__all__ = ["SettingsPage"]
