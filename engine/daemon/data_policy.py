"""The data policy: which folders' files must be scanned for personal data, or scrubbed, before a fine-tune
trains on them. Enforced here, at ``jobs.start``, whatever client asks (docs/privacy.md).

A rule is ``{folder, max_findings}`` or ``{project, max_findings}``: a data file under ``folder`` (``/`` for
every file), or any data file of a job of ``project``, must have a succeeded ``pii.scan`` of its exact content
(its sha256), and with ``max_findings`` set, that scan may have found at most that many; a file written by a
succeeded ``pii.scrub`` always passes (it is the scrubbed copy). Of the folder rules the most specific one
applies; a project's rule applies as well, and each must hold. Rules live in the store's settings
(``pii_policy``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from engine.api.job_terms import PII_SCAN, PII_SCRUB, SUCCEEDED
from engine.api.protocol import POLICY_REFUSED, RpcError
from engine.daemon.job_records import read_json
from engine.daemon.lineage import file_sha256, folder_sha256
from engine.daemon.projects import TRAINING, data_paths

SETTING = "pii_policy"


def rules(store: Any) -> list[dict[str, Any]]:
    return list((store.get_setting(SETTING) or {}).get("rules") or [])


def _key(folder: str | None, project: str | None) -> tuple[str, str]:
    if project:
        return ("project", project)
    return ("folder", str(Path(folder or "/").expanduser().resolve()) if folder != "/" else "/")


def _sorted(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(kept, key=lambda r: (0, r["folder"]) if "folder" in r else (1, r["project"]))


def set_rule(store: Any, folder: str | None, max_findings: int | None, project: str | None = None) -> list[dict[str, Any]]:
    what, value = _key(folder, project)
    kept = [r for r in rules(store) if r.get(what) != value]
    kept.append({what: value, "max_findings": max_findings})
    store.set_setting(SETTING, {"rules": _sorted(kept)})
    return rules(store)


def clear_rule(store: Any, folder: str | None, project: str | None = None) -> list[dict[str, Any]]:
    what, value = _key(folder, project)
    store.set_setting(SETTING, {"rules": [r for r in rules(store) if r.get(what) != value]})
    return rules(store)


def rule_for(all_rules: list[dict[str, Any]], path: Path) -> dict[str, Any] | None:
    """The rule of the deepest folder holding ``path``."""
    best = None
    for r in all_rules:
        if "folder" not in r:
            continue
        folder = Path(r["folder"])
        if (r["folder"] == "/" or folder == path or folder in path.parents) and \
                (best is None or len(r["folder"]) > len(best["folder"])):
            best = r
    return best


def _records(store: Any) -> dict[str, dict[str, Any]]:
    """sha256 -> what is known of that content: its latest scan, and the scrub that wrote it."""
    known: dict[str, dict[str, Any]] = {}
    jobs = [j for kind in (PII_SCAN, PII_SCRUB) for j in store.list_jobs(state=SUCCEEDED, kind=kind, limit=100_000)]
    for job in jobs:
        result = read_json(Path(job["run_dir"]) / "result.json") or {}
        if job["kind"] == PII_SCAN and result.get("sha256"):
            entry = known.setdefault(result["sha256"], {})
            if entry.get("scan_t", 0) <= (job.get("ended_at") or 0):
                entry.update(scan=job["id"], findings=(result.get("findings") or {}).get("total"),
                             scan_t=job.get("ended_at") or 0)
        elif job["kind"] == PII_SCRUB and (result.get("output") or {}).get("sha256"):
            known.setdefault(result["output"]["sha256"], {})["scrubbed_by"] = job["id"]
    return known


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _hash(path: Path) -> str:
    if path.is_dir():
        return folder_sha256(path, sorted(p for p in path.rglob("*") if p.is_file()))
    return file_sha256(path)


async def check(store: Any, kind: str, spec: Any, project: str = "") -> None:
    """Refuse (RpcError POLICY_REFUSED) a fine-tune or sweep whose data the policy does not allow yet."""
    all_rules = rules(store)
    if not all_rules or kind not in TRAINING:
        return
    records: dict[str, dict[str, Any]] | None = None
    project_rule = next((r for r in all_rules if r.get("project") == project), None)
    for path in data_paths(kind, spec):
        applying = [r for r in (rule_for(all_rules, path), project_rule) if r is not None]
        if not applying or not _exists(path):
            continue  # a missing file fails the job with its own message
        sha = await asyncio.to_thread(_hash, path)
        if records is None:  # read the scans' results once, only when a rule applies
            records = _records(store)
        for rule in applying:
            _enforce(rule, path, sha, records.get(sha, {}))


def _enforce(rule: dict[str, Any], path: Path, sha: str, known: dict[str, Any]) -> None:
    if known.get("scrubbed_by"):
        return
    limit = rule.get("max_findings")
    where = (f"project {rule['project']}" if "project" in rule else
             "every folder" if rule["folder"] == "/" else rule["folder"])
    data = {"path": str(path), "folder": rule.get("folder"), "project": rule.get("project"), "rule": rule,
            "sha256": sha, "scan": known.get("scan")}
    if not known.get("scan"):
        raise RpcError(POLICY_REFUSED, f"{path.name} has not been scanned for personal data, and the data "
                       f"policy for {where} requires it",
                       {**data, "hint": f"Scan it first (Data step › Scan for personal data, or ember pii scan "
                                        f"{path}); a changed file needs a new scan."})
    if limit is not None and (known.get("findings") or 0) > limit:
        raise RpcError(POLICY_REFUSED, f"{path.name} holds {known['findings']} findings of personal data; the "
                       f"data policy for {where} allows {limit} before it must be scrubbed",
                       {**data, "findings": known["findings"],
                        "hint": f"Scrub it (Data step › Scrub, or ember pii scrub {path}) and train on the "
                                "scrubbed copy."})
