"""What each protocol method names: every parameter that is a resource, by kind (docs/security.md).

The role table (engine/api/permissions.py) says which verbs a user may use; this table says which nouns a
request names, so one check in the engine (engine/daemon/resource_check.py) can resolve each against the
caller's projects before any handler runs. Every parameter of every method is listed, ``PLAIN`` for the
ones that name nothing, and the engine refuses to start when a handler takes a parameter this table does
not list: a new method cannot forget its resources.

Job specs name resources in their fields (a data file, a source run, a served endpoint); those fields say
so themselves with ``json_schema_extra=resource(KIND)`` (see ``spec_fields``), and the check walks a
spec's fields by the spec model. Stdlib only: the GUI and the docs generator import it.
"""

from __future__ import annotations

from typing import Any

# ---- kinds of resource
PLAIN = "plain"  # names nothing the engine holds for a project (a number, a label, a setting)
READ = "read"  # a file or folder the engine (or a job it starts) reads
WRITE = "write"  # a file or folder written
NAME_OR_PATH = "name-or-path"  # a built-in dataset or Hub id, else a path that is read
SECRET_FILE = "secret-file"  # a file holding a secret (an API key): only from the engine's own machine
PROGRAM = "program"  # a program the engine runs: admins only
RUN = "run"  # a job or run id
TOPICS = "topics"  # event topic globs: each event is shown only to those who may see it
CHAT = "chat"  # a saved chat's id
TEMPLATE = "template"  # a saved template's name
REQUEST = "request"  # a Playground answer's request id
HOST = "host"  # a host profile's name
PROJECT = "project"  # the project a new job goes into
URL = "url"  # an endpoint the engine sends requests to
SECRET = "secret"  # the name of a secret the engine keeps for a project
MODEL = "model"  # a Playground model reference: its run, path, url and key fields are resources
SPEC = "spec"  # a job spec: its fields are walked by its kind's spec model (``kind`` beside it)
TRAIN_SPEC = "train-spec"  # a fine-tune spec, for the methods that look at one before launch
KINDS = (PLAIN, READ, WRITE, NAME_OR_PATH, SECRET_FILE, PROGRAM, RUN, TOPICS, CHAT, TEMPLATE, REQUEST, HOST,
         PROJECT, URL, SECRET, MODEL, SPEC, TRAIN_SPEC)

KIND_WORDS = {
    PLAIN: "names no resource",
    READ: "a file or folder read: inside the caller's projects' data folders or their runs' folders",
    WRITE: "a file or folder written: inside the caller's projects' data folders",
    NAME_OR_PATH: "a built-in or Hub name, else a file read (as read)",
    SECRET_FILE: "a file holding a key: only on the engine's own machine, never over the network",
    PROGRAM: "a program the engine runs: admins only",
    RUN: "a job of the caller's projects",
    TOPICS: "event topics: each event reaches only those who may see its job, request or host",
    CHAT: "a saved chat of the caller's projects (replaced or deleted by its owner or an admin)",
    TEMPLATE: "a template of the caller's projects (replaced or deleted by its owner or an admin)",
    REQUEST: "a Playground answer the caller asked for",
    HOST: "a host given to the caller's projects, or to none",
    PROJECT: "one of the caller's projects",
    URL: "an endpoint of the caller's project: an Ember serve job of it on loopback, or one an admin allowed",
    SECRET: "a secret an admin keeps for the caller's project",
    MODEL: "a model: its run, path, url and key are checked as run, read, url and secret-file",
    SPEC: "a job spec: each field that names a resource is checked by its kind",
    TRAIN_SPEC: "a fine-tune spec: each field that names a resource is checked by its kind",
}


def resource(kind: str) -> dict[str, Any]:
    """A spec field's ``json_schema_extra``: the kind of resource the field names."""
    assert kind in KINDS, kind
    return {"resource": kind}


# method -> {parameter: kind}: every parameter every method takes (hello is the handshake: no table).
_JOB = {"id": RUN}
PARAMS: dict[str, dict[str, str]] = {
    "ping": {}, "engine.status": {}, "engine.methods": {}, "engine.shutdown": {},
    "diag.burst": {"topic": PLAIN, "count": PLAIN, "payload_bytes": PLAIN},
    "jobs.list": {"state": PLAIN, "kind": PLAIN, "limit": PLAIN},
    "jobs.get": _JOB, "jobs.stop": _JOB, "jobs.cancel": _JOB, "jobs.resume": _JOB, "jobs.artifacts": _JOB,
    "jobs.lineage": _JOB, "runs.lineage": _JOB, "compress.variants": _JOB, "evaluations.list": _JOB,
    "jobs.delete": {"id": RUN, "files": PLAIN},
    "jobs.kinds": {},
    "jobs.metrics": {"id": RUN, "kind": PLAIN, "names": PLAIN, "max_points": PLAIN},
    "jobs.logs": {"id": RUN, "tail": PLAIN},
    "jobs.start": {"kind": PLAIN, "spec": SPEC, "name": PLAIN, "project": PROJECT},
    "jobs.check": {"kind": PLAIN, "spec": SPEC, "name": PLAIN, "project": PROJECT},
    "jobs.prioritize": {"id": RUN, "priority": PLAIN},
    "queue.get": {}, "queue.move": {"id": RUN, "to": PLAIN},
    "queue.configure": {"max_concurrent": PLAIN, "cpu_cores": PLAIN, "allow_gpu_sharing": PLAIN},
    "subscribe": {"topics": TOPICS, "since": PLAIN},
    "unsubscribe": {"subscription": PLAIN},  # a subscription of this connection only
    "events.query": {"topics": TOPICS, "since": PLAIN, "limit": PLAIN},
    "data.preview": {"spec": TRAIN_SPEC, "n": PLAIN},
    "data.inspect": {"spec": TRAIN_SPEC, "n": PLAIN},
    "models.inspect": {"spec": TRAIN_SPEC}, "estimate.fit": {"spec": TRAIN_SPEC},
    "estimate.plan": {"spec": TRAIN_SPEC, "gpus": PLAIN, "gpu_memory_gb": PLAIN, "gpus_per_node": PLAIN},
    "machine.info": {},
    "models.list": {}, "models.search": {"text": PLAIN, "limit": PLAIN},
    "models.delete": {"repo_id": PLAIN, "revision": PLAIN},
    "hub.status": {}, "hub.login": {"token": PLAIN}, "hub.logout": {},
    "hosts.list": {}, "hosts.add": {"host": PLAIN}, "hosts.update": {"name": HOST, "host": PLAIN},
    "hosts.remove": {"name": HOST}, "hosts.check_key": {"name": HOST}, "hosts.forget_key": {"name": HOST},
    "hosts.trust": {"name": HOST, "fingerprint": PLAIN}, "hosts.slurm": {"name": HOST},
    "hosts.probe": {"name": HOST, "password": PLAIN}, "hosts.prepare": {"name": HOST, "password": PLAIN},
    "pii.policy": {},
    "pii.set_policy": {"folder": READ, "project": PROJECT, "max_findings": PLAIN, "clear": PLAIN},
    "playground.chat": {"model": MODEL, "messages": PLAIN, "settings": PLAIN},
    "playground.predict": {"model": MODEL, "text": PLAIN, "image": READ},
    "playground.stop": {"request": REQUEST},
    "playground.unload": {"model": MODEL},
    "playground.workers": {},
    "chats.list": {"limit": PLAIN, "offset": PLAIN},
    "chats.get": {"id": CHAT}, "chats.delete": {"id": CHAT},
    "chats.save": {"id": CHAT, "title": PLAIN, "sides": MODEL, "settings": PLAIN},
    "templates.list": {}, "templates.save": {"name": TEMPLATE, "kind": PLAIN, "spec": PLAIN},
    "templates.delete": {"name": TEMPLATE},
    "audit.list": {"limit": PLAIN, "offset": PLAIN, "action": PLAIN, "client": PLAIN, "target": PLAIN,
                   "since": PLAIN, "until": PLAIN, "ok": PLAIN, "text": PLAIN, "user": PLAIN},
    "users.me": {}, "users.list": {},
    "users.add": {"name": PLAIN, "role": PLAIN, "projects": PLAIN, "expires_days": PLAIN},
    "users.update": {"name": PLAIN, "role": PLAIN, "projects": PLAIN, "expires_days": PLAIN, "new_token": PLAIN},
    "users.revoke": {"name": PLAIN},
    "projects.list": {},
    "projects.set": {"name": PLAIN, "data_folders": PLAIN, "hosts": PLAIN, "endpoints": PLAIN, "remove": PLAIN},
    "secrets.list": {"project": PROJECT},
    "secrets.set": {"project": PROJECT, "name": PLAIN, "secret": PLAIN, "remove": PLAIN},
}
# Methods that change a chat or template: only its owner (or an admin) may; members of its project may read it.
OWNER_ONLY = frozenset({"chats.save", "chats.delete", "templates.save", "templates.delete"})


def resources_of(method: str) -> dict[str, str]:
    """The parameters of ``method`` that name a resource, with their kinds."""
    return {name: kind for name, kind in PARAMS.get(method, {}).items() if kind != PLAIN}
