"""Where the manual is: the Markdown of ``docs/`` shipped as ``app/resources/docs``.

Kept apart from app/shell/help.py (the menu and F1) so the help viewer can find the files
without importing the module that opens it.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # app/
# In order: shipped with the package (wheel, one-folder build, checkout), then a checkout's own
# docs/ (a checkout made where links are not supported holds a small text file instead).
DOC_DIRS = (PACKAGE / "resources" / "docs", PACKAGE.parent / "docs")
HOME_DOC = "first-run.md"  # Help › Documentation: from opening the window to a deployed model
TROUBLESHOOTING_DOC = "troubleshooting.md"
SHORTCUTS_DOC = "shortcuts-and-accessibility.md"


def docs_dir() -> Path | None:
    """The folder that holds the manual (with its first page in it), or None when none is installed."""
    for folder in DOC_DIRS:
        if (folder / HOME_DOC).is_file():
            return folder.resolve()  # a checkout's link to docs/: "../README.md" then resolves too
    return None


def missing_docs_message() -> str:
    looked = " and ".join(str(folder) for folder in DOC_DIRS)
    return ("The documentation is not installed with this copy of Ember Studio (looked in "
            f"{looked}). Reinstall Ember Studio from its source folder or wheel, or read the "
            "docs folder of its source.")


def heading_slug(text: str, taken: dict[str, int] | None = None) -> str:
    """A heading's anchor as GitHub makes it, so "file.md#anchor" links in the docs work here too.

    Lower case, punctuation dropped, spaces become hyphens; a repeated heading gets -1, -2 …
    (``taken`` counts the slugs of one document).
    """
    slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
    if taken is None:
        return slug
    count = taken.get(slug, 0)
    taken[slug] = count + 1
    return f"{slug}-{count}" if count else slug
