"""A job's lineage record as a Markdown report (``ember lineage --out``, the GUI's Save as Markdown).

The record itself is built by the engine (engine/daemon/lineage.py, ``jobs.lineage``); this module
only formats it, so the GUI and the CLI read it without any path to the store or to torch. Stdlib only.
"""

from __future__ import annotations

import json
import time
from typing import Any


def _when(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else "-"


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return "-"


def _hash_line(entry: dict[str, Any]) -> str:
    if entry.get("sha256"):
        files = f", {entry['files']} files" if entry.get("storage") == "folder" else ""
        return f"`{entry.get('path')}` ({entry.get('storage')}, {_size(entry.get('size'))}{files}) sha256 `{entry['sha256']}`"
    if entry.get("path"):
        return f"`{entry.get('path')}` ({entry.get('storage', 'not hashed')})"
    return ""


def _scrub_line(d: dict[str, Any]) -> str:
    s = d["scrubbed"]
    src = s.get("source") or {}
    modes = ", ".join(f"{e} {m}" for e, m in sorted((s.get("modes") or {}).items())
                      if e in (s.get("by_entity") or {}))
    same = "" if not d.get("sha256") or d["sha256"] == s.get("output_sha256") else \
        " (the file has changed since it was written)"
    return (f"  - scrubbed copy{same} of `{src.get('path')}` sha256 `{src.get('sha256')}`, written by {s['job']} "
            f"(pii.scrub): {s.get('replaced')} findings replaced" + (f" ({modes})" if modes else ""))


def _section(rec: dict[str, Any], level: int, relation: str = "") -> list[str]:
    run = rec["run"]
    h = "#" * level
    title = f"{run.get('id')} ({run.get('kind')})" + (f", {relation}" if relation else "")
    lines = [f"{h} {title}", ""]
    lines += [f"- Name: {run.get('name') or '-'}", f"- State: {run.get('state')}",
              f"- Created: {_when(run.get('created_at'))}, ended: {_when(run.get('ended_at'))}",
              f"- Host: {run.get('host') or 'local'}; run folder `{run.get('run_dir')}`",
              f"- Launched by: {run.get('owner') or 'local'}" + (f" (project {run['project']})" if run.get("project")
                                                                 else "")]
    if run.get("error"):
        lines.append(f"- Error: {(run['error'] or {}).get('message')}")
    code = rec.get("code") or {}
    commit = code.get("git_commit") or "not a git checkout"
    if code.get("git_dirty"):
        commit += " (with uncommitted changes)"
    lines.append(f"- Code: ember-studio {code.get('ember_version')}, git {commit} ({code.get('recorded', '')})")
    lines += ["", f"{h}# Base model", ""]
    base = rec.get("base_model") or {}
    desc = base.get("builtin") or base.get("run") or "local"
    lines.append(f"- {base.get('kind')}: {desc}" + (f", {base['source']}" if base.get("source") else "")
                 + (f" ({base['note']})" if base.get("note") else ""))
    if _hash_line(base):
        lines.append(f"- Weights: {_hash_line(base)}")
    if base.get("code_file"):
        code_file = base["code_file"]
        lines.append(f"- Model code ({code_file.get('entry')}): {_hash_line(code_file)}; approved sha256 "
                     f"`{code_file.get('approved_sha256')}`")
    lines += ["", f"{h}# Data", ""]
    for d in rec.get("data") or []:
        what = f"built-in {d['builtin']}" if d.get("builtin") else ""
        extra = "; ".join(x for x in (what, d.get("source"), d.get("version"), d.get("note")) if x)
        lines.append(f"- {d.get('role')}: {_hash_line(d) or ''}{' — ' if _hash_line(d) and extra else ''}{extra}")
        if d.get("scrubbed"):
            lines.append(_scrub_line(d))
    if not rec.get("data"):
        lines.append("- none")
    packages = rec.get("packages") or {}
    lines += ["", f"{h}# Packages ({packages.get('recorded')})", ""]
    if packages.get("python"):
        lines.append(f"- python {packages['python']}")
    lines += [f"- {name} {version}" for name, version in (packages.get("versions") or {}).items() if version]
    lines += ["", f"{h}# Artifacts", ""]
    for a in rec.get("artifacts") or []:
        lines.append(f"- {a.get('type')}" + (f" (step {a['step']})" if a.get("step") is not None else "")
                     + f": {_hash_line(a)}")
    if not rec.get("artifacts"):
        lines.append("- none recorded")
    ckpts = rec.get("checkpoints") or []
    if ckpts:
        lines.append(f"- checkpoints (not hashed): {', '.join(c['name'] for c in ckpts)}")
    lines += ["", f"{h}# Spec (as stored)", "", "```json", json.dumps(rec.get("spec"), indent=1, sort_keys=True),
              "```", ""]
    for parent in rec.get("parents") or []:
        if parent.get("lineage"):
            lines += _section(parent["lineage"], min(level + 1, 5), f"{parent['relation']} of {run.get('id')}")
        else:
            lines += [f"{h}# {parent['relation']} {parent['id']}", "", f"- {parent.get('note')}", ""]
    return lines


def to_markdown(rec: dict[str, Any]) -> str:
    """The lineage record as a Markdown report (the CLI's --out and the GUI's Save as Markdown)."""
    head = [f"# Lineage of {rec['run'].get('id')}", "",
            f"Generated {_when(rec.get('generated_at'))} by Ember Studio. Hashes are sha256; a folder's hash is "
            "over its sorted `path\\0sha256` lines.", ""]
    return "\n".join(head + _section(rec, 2)) + "\n"
