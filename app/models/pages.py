"""The page registry: the sidebar's pages, top to bottom, by id, label and class name.

The main window, the preferences (last page), the shortcuts (Ctrl+1 …), F1 help and
the tour read this list; none of them needs the main window's module for it. It is
data only (it sits below the widgets in the GUI's layers): the main window imports a
page's module (``app.pages.<key>``) the first time the page is shown.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageEntry:
    key: str  # also the module name under app/pages/ and the icon name
    title: str
    class_name: str  # in the module app.pages.<key>


# The order a model goes through its life.
PAGES = (
    PageEntry("welcome", "Welcome", "WelcomePage"),
    PageEntry("runs", "Runs", "RunsPage"),
    PageEntry("new_finetune", "New fine-tune", "NewFinetunePage"),
    PageEntry("monitor", "Monitor", "MonitorPage"),
    PageEntry("compress", "Compress", "CompressPage"),
    PageEntry("compare", "Compare", "ComparePage"),
    PageEntry("playground", "Playground", "PlaygroundPage"),
    PageEntry("export", "Export", "ExportPage"),
    PageEntry("models", "Models", "ModelsPage"),
    PageEntry("hosts", "Hosts", "HostsPage"),
    PageEntry("settings", "Settings", "SettingsPage"),
)

PAGE_KEYS = tuple(entry.key for entry in PAGES)


def row_of(key: str) -> int:
    """The sidebar row of page ``key``."""
    if key not in PAGE_KEYS:
        raise KeyError(f"No page {key!r}; pages are {', '.join(PAGE_KEYS)}")
    return PAGE_KEYS.index(key)
