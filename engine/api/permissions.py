"""Who may call what: the role each protocol method needs, in one table (docs/security.md).

Roles, each allowed what the one before it is:

- ``viewer``: see jobs, their metrics, logs, lineage and the queue;
- ``operator``: start, stop, resume, delete their own jobs and those of the projects they belong to, look at
  data and models, use the Playground, scan and scrub data;
- ``admin``: everything: hosts, users, the data policy, the queue's settings, the Hub token, stopping the
  engine, deleting anyone's jobs.

The engine checks ``RULES`` before a request reaches its handler (engine/daemon/handlers); a method
missing from it is refused, and tests/security/test_roles.py fails, so a new method cannot ship without a
rule. Stdlib only: the GUI imports it to grey out what a role may not do.
"""

from __future__ import annotations

ROLES = ("viewer", "operator", "admin")
VIEWER, OPERATOR, ADMIN = ROLES

# method -> the least role that may call it. "hello" needs none: it is how a client says who it is.
RULES: dict[str, str] = {
    # the engine itself
    "ping": VIEWER, "engine.status": VIEWER, "engine.methods": VIEWER, "engine.shutdown": ADMIN,
    "diag.burst": ADMIN,
    # jobs: reading
    "jobs.list": VIEWER, "jobs.get": VIEWER, "jobs.kinds": VIEWER, "jobs.logs": VIEWER, "jobs.metrics": VIEWER,
    "jobs.artifacts": VIEWER, "jobs.lineage": VIEWER, "runs.lineage": VIEWER, "compress.variants": VIEWER,
    "evaluations.list": VIEWER, "events.query": VIEWER, "subscribe": VIEWER, "unsubscribe": VIEWER,
    "queue.get": VIEWER,
    # jobs: acting (an operator only on the jobs of their projects: engine/daemon/access.py)
    "jobs.start": OPERATOR, "jobs.stop": OPERATOR, "jobs.cancel": OPERATOR, "jobs.resume": OPERATOR,
    "jobs.delete": OPERATOR, "jobs.check": OPERATOR, "jobs.prioritize": OPERATOR, "queue.move": OPERATOR,
    # looking at inputs on the engine's machine
    "data.preview": OPERATOR, "data.inspect": OPERATOR, "models.inspect": OPERATOR, "estimate.fit": OPERATOR,
    "estimate.plan": OPERATOR, "machine.info": VIEWER, "models.list": VIEWER, "models.search": OPERATOR,
    "hub.status": VIEWER, "hosts.list": VIEWER, "hosts.slurm": OPERATOR, "hosts.check_key": OPERATOR,
    "pii.policy": VIEWER,
    # the Playground and saved chats
    "playground.chat": OPERATOR, "playground.predict": OPERATOR, "playground.stop": OPERATOR,
    "playground.unload": OPERATOR, "playground.workers": VIEWER,
    "chats.list": OPERATOR, "chats.get": OPERATOR, "chats.save": OPERATOR,
    "chats.delete": OPERATOR,
    "templates.list": VIEWER, "templates.save": OPERATOR, "templates.delete": OPERATOR,
    # the engine's settings, machines and people
    "hosts.add": ADMIN, "hosts.update": ADMIN, "hosts.remove": ADMIN, "hosts.trust": ADMIN,
    "hosts.forget_key": ADMIN, "hosts.prepare": ADMIN, "hosts.probe": ADMIN,
    "queue.configure": ADMIN, "models.delete": ADMIN, "hub.login": ADMIN, "hub.logout": ADMIN,
    "pii.set_policy": ADMIN, "audit.list": ADMIN,
    "users.list": ADMIN, "users.add": ADMIN, "users.update": ADMIN, "users.revoke": ADMIN,
    "users.me": VIEWER, "projects.list": VIEWER, "projects.set": ADMIN,
    "secrets.list": OPERATOR, "secrets.set": ADMIN,
}
# Methods that act on one job (params ``id``): an operator needs the job to be theirs or in one of their
# projects; a viewer sees only those projects' jobs.
JOB_METHODS = frozenset({"jobs.get", "jobs.logs", "jobs.metrics", "jobs.artifacts", "jobs.lineage", "runs.lineage",
                         "jobs.stop", "jobs.cancel", "jobs.resume", "jobs.delete", "jobs.prioritize", "queue.move",
                         "compress.variants", "evaluations.list"})
# What each role may do, in words (docs/security.md's table, the Users page).
ROLE_WORDS = {
    VIEWER: "sees the jobs, metrics, logs and lineage of their projects",
    OPERATOR: "also starts, stops, resumes and deletes jobs in their projects, looks at data and models, "
              "uses the Playground, scans and scrubs data",
    ADMIN: "everything: every project, hosts, users, the data policy, queue settings, the Hub token, "
           "the audit log, stopping the engine",
}


def allowed(role: str, method: str) -> bool:
    """True when ``role`` may call ``method`` (an unknown role or method: never)."""
    need = RULES.get(method)
    return need is not None and role in ROLES and ROLES.index(role) >= ROLES.index(need)
