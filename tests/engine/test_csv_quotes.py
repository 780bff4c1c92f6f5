"""A CSV row with a quote left open is named with its line, not merged silently with the rows after it;
a quoted field that really holds line breaks still reads as one row."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.tasks.text_files import read_rows

ROWS = [("Charged twice this month", "billing"), ("Where is my parcel", "shipping"),
        ("App crashes on start", "bug"), ("Refund not received", "billing"),
        ("Package arrived broken", "shipping"), ("Login button does nothing", "bug")]
UNCLOSED = 'a quote (") opened here is never closed on its row'


def write(tmp_path: Path, lines: list[str], name: str = "train.csv") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def body() -> list[str]:
    return ["text,label"] + [f"{text},{label}" for text, label in ROWS]


def test_a_quote_left_open_to_the_end_of_the_file_is_named_with_its_line(tmp_path):
    lines = body()
    lines[3] = '"App crashes on start,bug'  # line 4: the quote is never closed
    path = write(tmp_path, lines)
    rows = read_rows(path, "text", "label")
    assert [str(i) for i in rows.issues] == [
        f'{path}:4: {UNCLOSED}, so the rows after it (up to the end of the file) were read as one field '
        '(close it, or escape it as "" if it is part of the text)']
    assert rows.lines == [2, 3]  # the rows before it are read as before


def test_a_quote_closed_rows_later_inside_a_field_is_named_too(tmp_path):
    lines = body()
    lines[2] = '"Where is my parcel,shipping'  # line 3
    lines[5] = '"Package" arrived broken,shipping'  # line 6: a quote that ends the swallowed rows
    path = write(tmp_path, lines)
    rows = read_rows(path, "text", "label")
    assert [(i.line, i.message.split(",")[0]) for i in rows.issues] == [(3, UNCLOSED)]
    assert "up to line 6" in rows.issues[0].message
    assert rows.lines == [2, 7]  # no row with a text of four lines and a borrowed label


def test_rows_swallowed_whole_by_a_closed_quote_are_still_caught(tmp_path):
    # Strictly valid CSV: the quote opened on line 3 closes at the end of line 5, right before the comma.
    lines = body()
    lines[2] = '"Where is my parcel,shipping'
    lines[4] = 'Refund not received",billing'
    path = write(tmp_path, lines)
    rows = read_rows(path, "text", "label")
    assert [i.line for i in rows.issues] == [3] and UNCLOSED in rows.issues[0].message
    assert "up to line 5" in rows.issues[0].message


def test_quoted_fields_with_line_breaks_commas_and_escaped_quotes_still_read(tmp_path):
    lines = body() + ['"Dear team,', 'the invoice shows, twice, the same ""premium"" plan', 'Regards",billing',
                      '"Two lines', 'only",bug']
    path = write(tmp_path, lines)
    rows = read_rows(path, "text", "label")
    assert rows.issues == []
    assert rows.lines == [2, 3, 4, 5, 6, 7, 8, 11]
    assert rows.texts[-2] == 'Dear team,\nthe invoice shows, twice, the same "premium" plan\nRegards'
    assert rows.labels[-2:] == ["billing", "bug"]


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_other_delimiters_name_the_open_quote_too(tmp_path, delimiter):
    lines = [line.replace(",", delimiter) for line in body()]
    lines[4] = f'"Refund not received{delimiter}billing'
    path = write(tmp_path, lines, "train.tsv" if delimiter == "\t" else "train.csv")
    rows = read_rows(path, "text", "label")
    assert [i.line for i in rows.issues] == [5] and UNCLOSED in rows.issues[0].message
