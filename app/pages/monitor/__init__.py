"""Monitor: live charts, progress, log and controls of a fine-tune (see page.py)."""

from app.pages.monitor.page import MonitorPage

__all__ = ["MonitorPage"]
