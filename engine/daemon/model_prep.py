"""A check that needs a built-in model not yet prepared starts (or follows) its ``system.prepare_model`` job.

The checks (models.inspect, jobs.check) run in a subprocess with a time limit; the first use of the built-in
SmolLM2 converts 538 MB, which on a busy laptop takes longer than that limit. So a check never converts:
it answers ``preparing`` with the job at once, and the GUI asks again while the job runs. A prepare job
that failed is reported as the check's issue; the next check after RETRY_AFTER_S starts a new one (the
user fixed the cause, or the failure was passing).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.api import prepared_models
from engine.api.job_terms import ACTIVE_STATES, FAILED, MODEL_PREPARE
from engine.api.specs import validate_spec

if TYPE_CHECKING:
    from engine.daemon.access import User
    from engine.daemon.interfaces import EngineView

RETRY_AFTER_S = 10.0  # a failed preparation is reported this long before a check starts another
POLL_S = 2.0  # how soon a client waiting on a preparation should ask again


def _last_progress(job: dict[str, Any]) -> dict[str, Any]:
    """The job's last progress event (a prepare job writes a handful)."""
    try:
        lines = (Path(job["run_dir"]) / "events.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("kind") == "progress":
            return {"stage": event.get("stage"), "fraction": event.get("fraction")}
    return {}


def check_or_prepare(engine: EngineView, user: User | None, spec: dict[str, Any]) -> dict[str, Any] | None:
    """None when every built-in model the spec names is ready; else the check's answer: the issues that stop
    the preparation, or ``preparing`` with the job that writes the model (started here when none runs).
    ``user`` None: only report, start nothing (the fit estimate a fine-tune's start stores)."""
    name = prepared_models.unprepared(spec)
    if name is None:
        return None
    issues = prepared_models.problems(name)
    if issues:
        return {"ok": False, "facts": None, "issues": issues}
    mine = [j for j in engine.store.list_jobs(kind=MODEL_PREPARE, limit=50) if (j.get("spec") or {}).get("builtin") == name]
    active = next((j for j in mine if j["state"] in ACTIVE_STATES), None)
    if active is None and mine and mine[0]["state"] == FAILED and time.time() - (mine[0].get("ended_at") or 0) < RETRY_AFTER_S:
        error = mine[0].get("error") or {}
        return {"ok": False, "facts": None,
                "issues": [{"message": f"Preparing {name} failed: {error.get('message') or 'see its job log'}",
                            "hint": error.get("hint") or f"Read the log of job {mine[0]['id']}; the next check tries again."}]}
    if active is None:
        if user is None:
            return {"ok": False, "facts": None, "issues": []}
        project = engine.access.project_for_start(user, None)
        active = engine.jobs.submit(MODEL_PREPARE, validate_spec(MODEL_PREPARE, {"builtin": name}), f"prepare {name}",
                                    owner=user.name, project=project)
    answer = prepared_models.preparing_answer(name, active)
    answer["preparing"].update(_last_progress(active))
    return answer
