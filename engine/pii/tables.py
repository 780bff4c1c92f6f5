"""The text cells of a data file, read for a PII scan and written back scrubbed.

CSV and TSV (a header row; the delimiter from the suffix, else sniffed) and JSONL (one object a line,
nested values walked: ``meta.author``; a chat's ``messages`` list gives one column per role,
``messages.user``, ``messages.assistant``). Every string value is a cell; numbers and booleans are
not scanned. A line that cannot be read is reported with its number and left out of a scrubbed copy
(it could hold anything). Stdlib only.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TEXT_SUFFIXES = (".csv", ".tsv", ".jsonl")
MAX_SKIPPED_LISTED = 20


@dataclass
class Table:
    path: Path
    format: str  # csv | jsonl
    delimiter: str = ","
    header: list[str] = field(default_factory=list)
    rows: list[Any] = field(default_factory=list)  # csv: list[list[str]]; jsonl: parsed objects
    lines: list[int] = field(default_factory=list)  # each row's 1-based line
    skipped: list[dict[str, Any]] = field(default_factory=list)


def _decode(path: Path) -> list[tuple[int, str | None]]:
    """(line number, text or None when not UTF-8) for every line."""
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    out: list[tuple[int, str | None]] = []
    for i, line in enumerate(raw.split(b"\n"), 1):
        try:
            out.append((i, line.decode("utf-8").rstrip("\r")))
        except UnicodeDecodeError:
            out.append((i, None))
    if out and out[-1][1] == "":
        out.pop()
    return out


def read(path: Path) -> Table:
    suffix = path.suffix.lower()
    if suffix not in TEXT_SUFFIXES:
        raise ValueError(f"{path.name}: a PII scan reads {', '.join(TEXT_SUFFIXES)} files or an image folder")
    lines = _decode(path)
    if suffix == ".jsonl":
        return _read_jsonl(path, lines)
    return _read_csv(path, lines, "\t" if suffix == ".tsv" else None)


def _skip(table: Table, line: int, reason: str) -> None:
    table.skipped.append({"line": line, "reason": reason})


def _read_jsonl(path: Path, lines: list[tuple[int, str | None]]) -> Table:
    table = Table(path, "jsonl")
    for n, text in lines:
        if text is None:
            _skip(table, n, "not UTF-8 text")
            continue
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            _skip(table, n, f"not valid JSON ({exc.msg})")
            continue
        table.rows.append(obj)
        table.lines.append(n)
    return table


def _read_csv(path: Path, lines: list[tuple[int, str | None]], delimiter: str | None) -> Table:
    good = [(n, t) for n, t in lines if t is not None]
    table = Table(path, "csv")
    for n, t in lines:
        if t is None:
            _skip(table, n, "not UTF-8 text")
    if not good:
        return table
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(good[0][1], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    table.delimiter = delimiter
    # csv needs the text whole (a quoted cell may span lines); line numbers come from the reader.
    text = "\n".join(t for _n, t in good)
    numbers = [n for n, _t in good]
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        table.header = next(reader)
        for row in reader:
            n = numbers[min(reader.line_num - 1, len(numbers) - 1)]
            if not row:
                continue
            if len(row) != len(table.header):
                _skip(table, n, f"{len(row)} fields where the header has {len(table.header)}")
                continue
            table.rows.append(row)
            table.lines.append(n)
    except csv.Error as exc:
        _skip(table, numbers[min(reader.line_num - 1, len(numbers) - 1)], f"unreadable CSV ({exc}); the rest of "
                                                                           "the file was not read")
    return table


def _walk(value: Any, column: str, out: list[tuple[str, Any, Any]], parent: Any, key: Any) -> None:
    """(column, container, key) of every string inside ``value``."""
    if isinstance(value, str):
        out.append((column, parent, key))
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{column}.{k}" if column else str(k), out, value, k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict) and isinstance(v.get("role"), str) and isinstance(v.get("content"), str):
                out.append((f"{column}.{v['role']}", v, "content"))  # a chat message: one column per role
            else:
                _walk(v, column, out, value, i)


def cells(table: Table) -> Iterator[tuple[int, int, str, str, Callable[[str], None]]]:
    """(row index, line, column, text, set) for every text cell; ``set`` replaces it in the table."""
    for r, row in enumerate(table.rows):
        line = table.lines[r]
        if table.format == "csv":
            for c, name in enumerate(table.header):
                yield r, line, name, row[c], (lambda v, row=row, c=c: row.__setitem__(c, v))
        else:
            found: list[tuple[str, Any, Any]] = []
            _walk(row, "", found, None, None)
            for column, parent, key in found:
                if parent is None:  # the whole line is a JSON string
                    yield r, line, column or "(value)", row, (lambda v, r=r: table.rows.__setitem__(r, v))
                else:
                    yield r, line, column, parent[key], (lambda v, p=parent, k=key: p.__setitem__(k, v))


def write(table: Table, out: Path) -> None:
    """The table as a file of the same format (rows that could not be read are left out)."""
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        if table.format == "csv":
            w = csv.writer(f, delimiter=table.delimiter, lineterminator="\n")
            w.writerow(table.header)
            w.writerows(table.rows)
        else:
            for row in table.rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(out)
