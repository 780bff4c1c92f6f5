"""Reading a text-and-label file: CSV/TSV (header row) or JSONL (one object a line).

``read_rows(path, text_column, label_column, field_name)`` returns ``Rows``: the
usable rows with their 1-based lines, and every problem as an ``Issue`` with its
line (a UTF-8 BOM is skipped, lines that are not UTF-8 are reported, a CSV's
delimiter is sniffed from its header row, a quoted field may hold line breaks but a quote left
open is named with its line instead of swallowing the rows after it). Past ``MAX_SAME_PROBLEM`` issues of one
kind, ``Problems`` sums up the rest in one issue. Plain Python: no torch or
transformers.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.tasks.base import Issue

MAX_SAME_PROBLEM = 20  # per file and kind; the rest are summed up in one issue


@dataclass
class Rows:
    """The usable rows of one file and the problems found in it."""

    file: str
    lines: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)


class Problems:
    """Adds Issues to ``rows``; past MAX_SAME_PROBLEM of one kind, the rest become one summary issue."""

    def __init__(self, rows: Rows):
        self.rows, self.seen, self.extra = rows, Counter(), {}

    def add(self, line: int | None, message: str, hint: str, kind: str | None = None) -> None:
        kind = kind or message
        self.seen[kind] += 1
        if self.seen[kind] <= MAX_SAME_PROBLEM:
            self.rows.issues.append(Issue(message, hint, self.rows.file, line))
        else:
            self.extra[kind] = (self.seen[kind] - MAX_SAME_PROBLEM, hint)

    def flush(self) -> None:
        for kind, (n, hint) in self.extra.items():
            self.rows.issues.append(Issue(f"{n} more line{'s' if n > 1 else ''} with the same problem: {kind}",
                                          hint, self.rows.file))


def _decode_lines(raw: bytes, problems: Problems) -> tuple[list[str], set[int]]:
    """Lines of the file (1-based index = position + 1) and the numbers of lines that are not UTF-8."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    bad: set[int] = set()
    out = []
    for n, chunk in enumerate(raw.split(b"\n"), start=1):
        try:
            out.append(chunk.decode("utf-8"))
        except UnicodeDecodeError as e:
            bad.add(n)
            problems.add(n, f"not valid UTF-8 (byte 0x{chunk[e.start]:02x} at position {e.start + 1})",
                         "save the file as UTF-8; in Excel: Save As > CSV UTF-8", "not valid UTF-8")
            out.append(chunk.decode("utf-8", errors="replace"))
    if out and out[-1] == "":
        out.pop()
    return out, bad


def read_rows(path: str, text_column: str, label_column: str, field_name: str = "data.path") -> Rows:
    """Read a CSV or JSONL file; every problem becomes an Issue with its 1-based line."""
    rows = Rows(path)
    problems = Problems(rows)
    add = problems.add
    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    if not p.exists():
        add(None, "file not found", f"check {field_name}; the file must exist on the machine that runs the training")
        return rows
    if p.is_dir():
        add(None, "is a folder, not a file", f"point {field_name} at a .csv or .jsonl file")
        return rows
    if suffix not in (".csv", ".tsv", ".jsonl", ".ndjson"):
        add(None, f"unsupported file type '{p.suffix or '(none)'}'",
            "use a .csv file with a header row, or a .jsonl file with one JSON object per line")
        return rows
    try:
        raw = p.read_bytes()
    except OSError as e:
        add(None, f"cannot read the file: {e.strerror or e}", "check that the file is readable by your user")
        return rows
    lines, bad = _decode_lines(raw, problems)
    if not any(line.strip() for line in lines):
        add(None, "the file is empty",
            "add a header row, then one example per row" if suffix in (".csv", ".tsv") else "add one JSON object per line")
        return rows
    if suffix in (".csv", ".tsv"):
        _parse_csv(rows, lines, bad, suffix, text_column, label_column, add)
    else:
        _parse_jsonl(rows, lines, bad, text_column, label_column, add)
    if not rows.issues and not rows.texts:
        add(None, "no examples found", "add examples below the header row" if suffix in (".csv", ".tsv") else "add one JSON object per line")
    problems.flush()
    return rows


def _check_row(rows: Rows, add, line: int, text: Any, label: Any, noun: str, text_column: str, label_column: str) -> None:
    ok = True
    if isinstance(text, (list, dict)):
        add(line, f"text in {noun} '{text_column}' is {_json_kind(text)}, not a string", "put the text in a plain string")
        ok = False
    elif text is None or not str(text).strip():
        add(line, f"empty text in {noun} '{text_column}'", "fill in the text or delete this row")
        ok = False
    if isinstance(label, (list, dict)):
        add(line, f"label in {noun} '{label_column}' is {_json_kind(label)}, not a string or number",
            "give each row exactly one label")
        ok = False
    elif label is None or not str(label).strip():
        add(line, f"missing label in {noun} '{label_column}'", "give this row a label or delete it")
        ok = False
    if ok:
        rows.lines.append(line)
        rows.texts.append(str(text))
        rows.labels.append(_label_str(label))


def _label_str(label: Any) -> str:
    if isinstance(label, bool):
        return str(label).lower()
    if isinstance(label, float) and label.is_integer():
        return str(int(label))
    return str(label).strip()


JSON_KINDS = {"list": "a list", "dict": "an object", "str": "a string", "int": "a number", "float": "a number",
              "bool": "true or false", "NoneType": "null"}


def _json_kind(value: Any) -> str:
    return JSON_KINDS[type(value).__name__]


def _parse_csv(rows: Rows, lines: list[str], bad: set[int], suffix: str, text_column: str, label_column: str, add) -> None:
    first = next(i for i, line in enumerate(lines) if line.strip())
    header_line = lines[first]
    delimiter = "\t" if suffix == ".tsv" else max(",;\t", key=lambda d: (header_line.count(d), d == ","))
    reader = csv.reader((line + "\n" for line in lines[first:]), delimiter=delimiter)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as e:
        add(first + 1, f"cannot parse the header row: {e}", "the first row must name the columns, e.g. text,label")
        return
    missing = [(c, f) for c, f in ((text_column, "data.text_column"), (label_column, "data.label_column")) if c not in header]
    for column, spec_field in missing:
        add(first + 1, f"no column '{column}' (columns: {', '.join(header)})",
            f"set {spec_field} to the column that holds the {'text' if spec_field == 'data.text_column' else 'labels'}")
    if missing:
        return
    ti, li = header.index(text_column), header.index(label_column)
    records: list[tuple[int, int, list[str]]] = []  # (first line, last line, fields)
    while True:
        start = first + reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            add(start, f"cannot parse this row: {e}", "check the quotes on this row (a quote inside a field is written twice: \"\")")
            continue
        end = first + reader.line_num
        if not any(v.strip() for v in record):
            continue
        if bad.intersection(range(start, end + 1)):
            continue  # already reported as not UTF-8
        records.append((start, end, record))
    # The labels of one-line rows: what a row swallowed by an unclosed quote looks like inside it.
    known = {r[li].strip() for start, end, r in records if start == end and li < len(r) and r[li].strip()}
    for start, end, record in records:
        if end > start and _unclosed_quote(lines[start - 1:end], delimiter, len(header), li, known):
            reach = "the end of the file" if end == len(lines) else f"line {end}"
            add(start, f'a quote (") opened here is never closed on its row, so the rows after it (up to {reach}) '
                "were read as one field", 'close it, or escape it as "" if it is part of the text',
                'a quote (") opened here is never closed')
            continue
        text = record[ti] if ti < len(record) else None
        label = record[li] if li < len(record) else None
        _check_row(rows, add, start, text, label, "column", text_column, label_column)


def _unclosed_quote(span: list[str], delimiter: str, columns: int, li: int, known: set[str]) -> bool:
    """Whether a record read over several lines (``span``) comes from a quote left open, not a multi-line field.

    A field may hold line breaks when it is quoted, so such a record is accepted only when it is well formed:
    read strictly it is one record with the header's columns, no line inside it reads as a row of its own
    (the header's columns and a label seen on the file's one-line rows), and its first line is not a whole
    row with a stray quote before the label.
    """
    try:
        strict = list(csv.reader((line + "\n" for line in span), delimiter=delimiter, strict=True))
    except csv.Error:
        return True  # the file ends inside the quotes, or text follows the quote that closed it
    if len(strict) != 1 or len(strict[0]) != columns:
        return True

    def looks_like_row(line: str) -> bool:
        fields = next(csv.reader([line], delimiter=delimiter, quoting=csv.QUOTE_NONE), [])
        return len(fields) == columns and fields[li].strip() in known

    if any(looks_like_row(line) for line in span[1:-1]):
        return True
    opening = next(csv.reader([span[0]], delimiter=delimiter, quoting=csv.QUOTE_NONE), [])
    quoted = next((i for i, f in enumerate(opening) if f.lstrip().startswith('"')), columns)
    return quoted < li and looks_like_row(span[0])


def _parse_jsonl(rows: Rows, lines: list[str], bad: set[int], text_column: str, label_column: str, add) -> None:
    objects: list[tuple[int, dict]] = []
    keys: dict[str, None] = {}
    example = json.dumps({text_column: "...", label_column: "..."})
    for n, line in enumerate(lines, start=1):
        if not line.strip() or n in bad:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            add(n, f"not valid JSON: {e.msg} at column {e.colno}", f"each line must be one JSON object, e.g. {example}", "not valid JSON")
            continue
        if not isinstance(obj, dict):
            add(n, f"expected a JSON object, got {JSON_KINDS.get(type(obj).__name__, 'a value')}",
                f"each line must be one JSON object, e.g. {example}", "expected a JSON object")
            continue
        keys.update(dict.fromkeys(obj))
        objects.append((n, obj))
    missing = False
    for column, spec_field, what in ((text_column, "data.text_column", "text"), (label_column, "data.label_column", "labels")):
        if objects and all(column not in obj for _, obj in objects):
            missing = True
            add(objects[0][0], f"no field '{column}' in any row (fields: {', '.join(keys)})",
                f"set {spec_field} to the field that holds the {what}")
    if missing:
        return
    for n, obj in objects:
        _check_row(rows, add, n, obj.get(text_column), obj.get(label_column), "field", text_column, label_column)


PROFILE_ROWS = 2000  # enough rows to tell a text column from a label column, cheap on any file


def column_profile(path: str) -> list[dict[str, Any]]:
    """The columns (CSV/TSV header, JSONL keys) of a data file, each with what tells text from labels.

    Each entry: ``name``, ``mean_chars`` (average length of its values), ``distinct`` (different
    values) and ``filled`` (rows with a value), over the first PROFILE_ROWS rows. An unreadable or
    unsupported file gives []: read_rows reports why.
    """
    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".tsv", ".jsonl", ".ndjson") or not p.is_file():
        return []
    try:
        with p.open(encoding="utf-8-sig", errors="replace", newline="") as f:
            lines = [line for _n, line in zip(range(PROFILE_ROWS + 1), f, strict=False)]
    except OSError:
        return []
    values: dict[str, list[str]] = {}
    if suffix in (".csv", ".tsv"):
        lines = [line for line in lines if line.strip()]
        if not lines:
            return []
        delimiter = "\t" if suffix == ".tsv" else max(",;\t", key=lambda d: (lines[0].count(d), d == ","))
        try:
            records = list(csv.reader(lines, delimiter=delimiter))
        except csv.Error:
            return []
        header = [h.strip() for h in records[0]]
        for name in header:
            values.setdefault(name, [])
        for record in records[1:]:
            for name, value in zip(header, record, strict=False):
                if value.strip():
                    values[name].append(value.strip())
    else:
        for line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                for name, value in obj.items():
                    column = values.setdefault(str(name), [])
                    if isinstance(value, (str, int, float, bool)) and str(value).strip():
                        column.append(str(value).strip())
    return [{"name": name, "mean_chars": round(sum(map(len, vals)) / len(vals), 1) if vals else 0.0,
             "distinct": len(set(vals)), "filled": len(vals)} for name, vals in values.items() if name]


def guess_columns(profile: list[dict[str, Any]]) -> dict[str, str]:
    """The likeliest text column (the longest values) and label column (the fewest distinct values, 2 or more).

    Returns ``{"text_column": .., "label_column": ..}`` with what it could guess; a guess is
    only offered, the user's choice stands.
    """
    filled = [c for c in profile if c["filled"]]
    guess: dict[str, str] = {}
    if not filled:
        return guess
    text = max(filled, key=lambda c: (c["mean_chars"], c["distinct"]))
    guess["text_column"] = text["name"]
    # A label repeats: a column with a different value on every row (an id) is not one.
    labels = [c for c in filled if c["name"] != text["name"] and c["distinct"] >= 2
              and (c["distinct"] < c["filled"] or c["filled"] < 4)]
    if labels:
        guess["label_column"] = min(labels, key=lambda c: (c["distinct"], c["mean_chars"]))["name"]
    return guess
