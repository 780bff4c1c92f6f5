"""The import rules no linter contract can state: no cycle at all, and each job term written once.

import-linter (pyproject, run by scripts/test.sh) checks the layers. A layers contract still lets two
modules of one layer import each other, and a cycle hidden in a function-local import is one a reader
never sees; this test builds the whole import graph with grimp (every ``import`` statement, function
bodies and ``if TYPE_CHECKING:`` blocks included) and fails on any cycle.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def import_cycles(*packages: str) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted; [] when there is none."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for module in sorted(graph.modules):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return cycles


def test_engine_and_app_have_no_import_cycle():
    assert import_cycles("engine", "app") == []


def test_a_cycle_through_a_function_local_import_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyclepkg.a import b  # hidden in a function\n    return b\n")
    (pkg / "c.py").write_text("from cyclepkg import a\n")  # imports into the cycle, is not part of it
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclepkg") == [["cyclepkg.a", "cyclepkg.b"]]


def _code_strings(path: Path) -> list[str]:
    """The string literals of a module's code (docstrings and comments may name a kind in prose)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    return [t.string for t in tokens if t.type == tokenize.STRING]


def test_job_kinds_and_states_are_written_once():
    from engine.api import job_terms

    kinds = {f'"{k}"' for k in job_terms.KINDS} | {f"'{k}'" for k in job_terms.KINDS}
    finals = re.compile(r"\(\s*" + r",\s*".join(f'"{s}"' for s in job_terms.FINAL_STATES) + r"\s*\)")
    live = re.compile(r'\(\s*"running",\s*"stopping"\s*\)')
    found = []
    for path in sorted([*ROOT.joinpath("engine").rglob("*.py"), *ROOT.joinpath("app").rglob("*.py")]):
        if path.name == "job_terms.py":
            continue
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel}: {s}" for s in _code_strings(path) if s in kinds]
        text = path.read_text()
        found += [f"{rel}: a tuple of states" for _ in finals.finditer(text)]
        found += [f"{rel}: a tuple of states" for _ in live.finditer(text)]
    assert found == [], "use engine.api.job_terms instead of writing these out:\n" + "\n".join(found)
