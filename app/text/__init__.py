"""What the GUI says, as plain functions and tables: numbers, sizes and times as text, field names, the
glossary of terms, the manual's pages, a host's probed facts. No Qt at import time and nothing of the GUI.
"""
