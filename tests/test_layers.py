"""The import rules no linter contract can state: no cycle at all, no upward import by name, and each job term
written once.

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


# A module named at run time (importlib.import_module) is an import no graph shows: allowed only where the
# name stays inside a package the importer may import (a dispatcher to its members, or the window building its
# pages) or names a third-party module.
DYNAMIC_IMPORTS = {
    "engine/tasks/__init__.py": "engine.tasks.",  # get_task(name): one of the tasks
    "engine/strategies/__init__.py": "engine.strategies.",  # get_strategy(name): one of the strategies
    "app/main_window.py": "app.pages.",  # the pages of the registry (app/models/pages.py), a layer below
    "engine/evaluate/peak_memory.py": "",  # the modules a user's pickled model names, before it is loaded
}


def dynamic_import_problems(root: Path) -> list[str]:
    """Each importlib.import_module call under engine/ and app/ that DYNAMIC_IMPORTS does not allow."""
    problems = []
    for path in sorted([*root.glob("engine/**/*.py"), *root.glob("app/**/*.py")]):
        file = path.relative_to(root).as_posix()
        for m in re.finditer(r"import_module\(\s*([^)\n]*)", path.read_text(encoding="utf-8")):
            arg, prefix = m.group(1).strip(), DYNAMIC_IMPORTS.get(file)
            if prefix is None or (prefix and not arg.startswith((f'f"{prefix}', f"f'{prefix}"))):
                problems.append(f"{file}: import_module({arg})")
    return problems


def test_modules_imported_by_name_stay_where_the_layers_allow():
    assert dynamic_import_problems(ROOT) == []


def test_an_upward_import_by_name_is_found(tmp_path):
    (tmp_path / "engine" / "training").mkdir(parents=True)
    (tmp_path / "engine" / "training" / "flops.py").write_text(
        'import importlib\n\ndef forward(task):\n    return importlib.import_module(f"engine.tasks.{task}")\n')
    assert dynamic_import_problems(tmp_path) == ['engine/training/flops.py: import_module(f"engine.tasks.{task}")']


def contracts() -> dict[str, dict]:
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["name"]: c for c in doc["tool"]["importlinter"]["contracts"]}


def children(package: str) -> set[str]:
    """The modules and packages directly in ``package``'s folder, as import-linter's exhaustive check sees them."""
    folder = ROOT / package
    return ({p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
            | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()})


def test_every_engine_folder_and_gui_module_has_its_place_in_the_contracts():
    """The layers contracts are exhaustive (import-linter fails on a module they do not place); the two lists
    layers cannot state (which job code the engine's processes and the GUI may not reach) name every folder
    they must, so a new one cannot slip past them."""
    found = contracts()
    for package in ("engine", "app"):
        (layers,) = [c for c in found.values() if c["type"] == "layers" and c.get("containers") == [package]]
        assert layers.get("exhaustive") is True
        placed = {name.strip() for layer in layers["layers"] for name in re.split(r"[|:]", layer)}
        assert placed == children(package), f"{package}: {placed ^ children(package)}"
    engine = {f"engine.{name}" for name in children("engine")}
    processes = next(c for c in found.values() if c.get("source_modules") == ["engine.cli", "engine.daemon",
                                                                              "engine.launch"])
    # The fit estimate (engine.estimate) and what it reads of engine.training (the GPU table, pure Python).
    reachable = {"engine.__main__", "engine.cli", "engine.daemon", "engine.launch", "engine.api", "engine.estimate",
                 "engine.training", "engine.threads"}
    assert set(processes["forbidden_modules"]) == engine - reachable
    gui = next(c for c in found.values() if c.get("source_modules") == ["app"]
               and any(m.startswith("engine.") for m in c["forbidden_modules"]))
    assert set(gui["forbidden_modules"]) == engine - {"engine.__main__", "engine.api", "engine.threads"}


def test_a_module_in_no_layer_fails_lint_imports(tmp_path):
    """The real layers lists, on a stand-in tree with the same folders and modules (empty, under other names, so
    the installed packages are not the ones read): kept as they are, broken by one folder more."""
    import json
    import os
    import subprocess

    found = contracts()
    lines = ["[tool.importlinter]", 'root_packages = ["probe_engine", "probe_app"]']
    for package in ("engine", "app"):
        (layers,) = [c for c in found.values() if c["type"] == "layers" and c.get("containers") == [package]]
        lines += ["[[tool.importlinter.contracts]]", f"name = {json.dumps(package)}", 'type = "layers"',
                  f'containers = ["probe_{package}"]', "exhaustive = true", f"layers = {json.dumps(layers['layers'])}"]
        root = tmp_path / f"probe_{package}"
        root.mkdir()
        (root / "__init__.py").write_text("")
        for child in children(package):
            if (ROOT / package / child).is_dir():
                (root / child).mkdir()
                (root / child / "__init__.py").write_text("")
            else:
                (root / f"{child}.py").write_text("")
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    lint = [str(Path(sys.executable).parent / "lint-imports"), "--config", str(tmp_path / "pyproject.toml"),
            "--no-cache"]
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def run():
        return subprocess.run(lint, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    kept = run()
    assert kept.returncode == 0, kept.stdout[-2000:] + kept.stderr[-2000:]
    (tmp_path / "probe_engine" / "newfolder").mkdir()
    (tmp_path / "probe_engine" / "newfolder" / "__init__.py").write_text("")
    broken = run()
    assert broken.returncode != 0 and "probe_engine.newfolder" in broken.stdout, broken.stdout[-2000:]
