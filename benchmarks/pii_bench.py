"""PII scan and scrub speed: Ember's scan and scrub of a CSV against Presidio called directly on the same cells.

    python benchmarks/pii_bench.py [--rows 100000]

The CSV holds support tickets, every other one carrying a personal value of a type Presidio finds
offline (e-mail, phone, card, IBAN, IP, URL, SSN, NHS number, MAC, crypto address), each row different.
"Presidio" is one AnalyzerEngine (the same recognizers and NLP engine Ember builds) asked for every
cell of the file in a plain loop, and for the scrub also its AnonymizerEngine; Ember's figure adds
reading and writing the file, counting per column, masked examples and the file's sha256. Both sides
run one after the other in this process; the ratio is Ember's rows/s over Presidio's (target: 0.9).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.pii import job  # noqa: E402
from engine.pii.analyzer import Analyzer, Finding, resolve_overlaps  # noqa: E402
from engine.pii.scrub import Scrubber  # noqa: E402

TARGET = 0.9
CARDS = ("4539 1488 0343 6467", "4111 1111 1111 1111", "5500 0000 0000 0004", "3400 0000 0000 009")
CLEAN = ("the printer on floor {n} is broken again", "I was charged twice for order {n}",
         "app crashes when I open settings, build {n}", "parcel {n} arrived damaged",
         "cannot reset my password, attempt {n}")
LABELS = ("billing", "account", "outage", "hardware")


def ticket(i: int) -> str:
    """A different ticket each row: every other one with one personal value."""
    if i % 2:
        return CLEAN[(i // 2) % len(CLEAN)].format(n=i)
    k = (i // 2) % 10
    return [
        f"please reply to user{i}@corp-mail.net about the refund",
        f"call me back on +1 (415) 555-{i % 10000:04d} tomorrow",
        f"my card {CARDS[i % len(CARDS)]} was charged twice, ticket {i}",
        f"refund to IBAN GB82 WEST 1234 5698 7654 32, ticket {i}",
        f"login blocked from 203.0.{i % 250}.{(i // 250) % 250} again",
        f"the page https://portal.acme-intranet.org/users/{i} shows an error",
        f"my ssn {536 + i % 200}-22-{1000 + i % 9000} is on the form",
        f"nhs number 943 476 5919 for claim {i}",
        f"device mac 3C:22:FB:{i % 256:02X}:41:07 cannot connect",
        f"paid with bitcoin to 1BoatSLRHtKNngkdXEeobR76b53LETtpyT, order {i}",
    ][k]


def write(path: Path, rows: int) -> list[list[str]]:
    table = [[ticket(i), LABELS[i % len(LABELS)]] for i in range(rows)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows(table)
    return table


def bare_scan(analyzer: Analyzer, table: list[list[str]]) -> int:
    found = 0
    for row in table:
        for cell in row:
            results = analyzer.engine.analyze(text=cell, language="en", score_threshold=analyzer.threshold)
            found += len(resolve_overlaps([Finding(r.entity_type, r.start, r.end, r.score) for r in results]))
    return found


def bare_scrub(analyzer: Analyzer, scrubber: Scrubber, table: list[list[str]]) -> int:
    from presidio_anonymizer.entities import OperatorConfig

    ops = {e: OperatorConfig("replace", {"new_value": f"<{e}>"}) for e in analyzer.entities}
    found = 0
    for row in table:
        for cell in row:
            results = analyzer.engine.analyze(text=cell, language="en", score_threshold=analyzer.threshold)
            found += len(results)
            scrubber.anonymizer.anonymize(text=cell, analyzer_results=results, operators=ops)
    return found


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    analyzer = Analyzer()
    scrubber = Scrubber({}, "tag", b"0123456789abcdef0123456789abcdef")
    print(f"Presidio {analyzer.info['presidio']}, {len(analyzer.info['recognizers'])} recognizers, "
          f"built in {time.perf_counter() - t0:.1f} s; {args.rows:,} rows, 2 cells each")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "tickets.csv"
        table = write(data, args.rows)
        bare_scan(analyzer, table[:200])  # warm-up: first-call costs on neither side
        rows = []
        s_bare, n_bare = timed(lambda: bare_scan(analyzer, table))
        s_ours, result = timed(lambda: job.scan(data, analyzer))
        assert result["findings"]["total"] == n_bare, (result["findings"]["total"], n_bare)
        rows.append(("scan", s_bare, s_ours, n_bare))
        c_bare, m_bare = timed(lambda: bare_scrub(analyzer, scrubber, table))
        c_ours, scrubbed = timed(lambda: job.scrub(data, Path(tmp) / "out.csv", analyzer, scrubber))
        rows.append(("scrub (tag)", c_bare, c_ours, scrubbed["replaced"]["total"]))
    print()
    print("| | Presidio directly | Ember | ratio (Ember / Presidio) | findings |")
    print("|---|---|---|---|---|")
    for name, bare, ours, n in rows:
        ratio = bare / ours
        mark = "" if ratio >= TARGET else f"  (below the {TARGET} target)"
        print(f"| {name} | {args.rows / bare:,.0f} rows/s | {args.rows / ours:,.0f} rows/s | {ratio:.2f}{mark} | {n:,} |")


if __name__ == "__main__":
    main()
