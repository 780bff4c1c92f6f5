"""Compress: the wizard that makes compressed variants of a finished fine-tune."""

from app.pages.compress.page import CompressPage

__all__ = ["CompressPage"]
