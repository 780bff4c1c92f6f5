"""Export: the wizard that turns a finished run or variant into deployable files (docs/export.md)."""

from app.pages.export.page import ExportPage
from app.pages.export.plan import model_file

__all__ = ["ExportPage", "model_file"]
