"""Widgets shared by several pages."""
