"""A PII scan and a scrub of one data file or image folder: what the pii.scan and pii.scrub jobs run.

``scan`` counts findings per column and entity type with a few masked examples; ``scrub`` writes a
scrubbed copy (the original is never opened for writing) and counts what it replaced the same way.
Both report progress through ``report(done, total)`` and stop between rows when ``should_stop()``.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.pii import images, tables
from engine.pii.analyzer import Analyzer, Finding
from engine.pii.scrub import Scrubber, masked_example

EXAMPLES = 3  # masked examples kept per column and entity type
CACHE = 100_000  # distinct cell texts remembered: a label column repeats a few values
REPORT_EVERY_S = 1.0


class Stopped(Exception):
    pass


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_dir():  # one hash over the sorted files: the same rule as a run's lineage
        for p in sorted(q for q in path.rglob("*") if q.is_file()):
            h.update(f"{p.relative_to(path).as_posix()}\0{sha256(p)}\n".encode())
        return h.hexdigest()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class Tally:
    """Findings per column and entity type, and a few masked examples of each."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.cells: Counter[str] = Counter()
        self.examples: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))

    def add(self, column: str, text: str, found: list[Finding]) -> None:
        if not found:
            return
        self.cells[column] += 1
        for f in found:
            self.counts[column][f.entity] += 1
            shown = self.examples[column][f.entity]
            example = masked_example(text[f.start:f.end])
            if len(shown) < EXAMPLES and example not in shown:
                shown.append(example)

    def summary(self) -> dict[str, Any]:
        by_entity: Counter[str] = Counter()
        for c in self.counts.values():
            by_entity.update(c)
        columns = [{"column": col, "cells": self.cells[col], "entities": dict(sorted(self.counts[col].items())),
                    "examples": {e: list(v) for e, v in sorted(self.examples[col].items())}}
                   for col in self.counts]
        return {"total": sum(by_entity.values()), "by_entity": dict(sorted(by_entity.items())), "columns": columns}


class _Cells:
    """Finds in each cell, remembering distinct texts, reporting progress and honouring a stop."""

    def __init__(self, analyzer: Analyzer, report: Callable[[int, int], None], should_stop: Callable[[], bool]):
        self.analyzer, self.report, self.should_stop = analyzer, report, should_stop
        self.cache: dict[str, list[Finding]] = {}
        self.last = time.monotonic()

    def find(self, text: str) -> list[Finding]:
        hit = self.cache.get(text)
        if hit is None:
            hit = self.analyzer.find(text)
            if len(self.cache) < CACHE:
                self.cache[text] = hit
        return hit

    def tick(self, done: int, total: int) -> None:
        if time.monotonic() - self.last >= REPORT_EVERY_S:
            self.last = time.monotonic()
            self.report(done, total)
            if self.should_stop():
                raise Stopped


def _base(path: Path, analyzer: Analyzer, kind: str) -> dict[str, Any]:
    return {"path": str(path), "sha256": sha256(path), "format": kind, **analyzer.info}


def scan(path: Path, analyzer: Analyzer, report: Callable[[int, int], None] = lambda d, t: None,
         should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    start = time.monotonic()
    run = _Cells(analyzer, report, should_stop)
    tally = Tally()
    if path.is_dir():
        files = images.image_files(path)
        out = _base(path, analyzer, "images")
        for i, f in enumerate(files):
            _scan_image(f, run, tally)
            run.tick(i + 1, len(files))
        out.update(rows=len(files), skipped=[])
    else:
        table = tables.read(path)
        out = _base(path, analyzer, table.format)
        n = len(table.rows)
        for r, _line, column, text, _set in tables.cells(table):
            tally.add(column, text, run.find(text))
            run.tick(r + 1, n)
        out.update(rows=n, skipped=table.skipped[:tables.MAX_SKIPPED_LISTED], skipped_rows=len(table.skipped))
    report(out["rows"], out["rows"])
    seconds = time.monotonic() - start
    out.update(findings=tally.summary(), seconds=round(seconds, 3), rows_per_s=round(out["rows"] / max(seconds, 1e-9), 1))
    return out


def _scan_image(f: Path, run: _Cells, tally: Tally) -> None:
    for field, kind, value in images.metadata(f):
        if kind:  # GPS, a serial number, an owner: identifying by where it sits
            tally.add(field, value or "(position)", [Finding(kind, 0, len(value or "(position)"), 1.0)])
        else:
            tally.add(field, value or "", run.find(value or ""))


def scrub(path: Path, out: Path, analyzer: Analyzer, scrubber: Scrubber,
          report: Callable[[int, int], None] = lambda d, t: None,
          should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Write the scrubbed copy of ``path`` at ``out``; the counts replaced, and the copy's own scan."""
    start = time.monotonic()
    run = _Cells(analyzer, report, should_stop)
    tally = Tally()
    result = _base(path, analyzer, "images" if path.is_dir() else path.suffix.lower().lstrip("."))
    if path.is_dir():
        files = images.image_files(path)
        for i, f in enumerate(files):
            _scan_image(f, run, tally)
            images.strip(f, out / f.relative_to(path))
            run.tick(i + 1, len(files))
        result.update(rows=len(files), skipped=[], skipped_rows=0)
    else:
        table = tables.read(path)
        n = len(table.rows)
        for r, _line, column, text, set_value in tables.cells(table):
            found = run.find(text)
            tally.add(column, text, found)
            if found:
                set_value(scrubber.scrub(text, found))
            run.tick(r + 1, n)
        tables.write(table, out)
        result.update(rows=n, skipped=table.skipped[:tables.MAX_SKIPPED_LISTED], skipped_rows=len(table.skipped))
    report(result["rows"], result["rows"])
    result.update(replaced=tally.summary(), modes={e: scrubber.mode(e) for e in analyzer.entities},
                  output={"path": str(out), "sha256": sha256(out)}, seconds=round(time.monotonic() - start, 3))
    return result
