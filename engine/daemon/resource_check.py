"""One access rule for every resource a request names (engine/api/resources.py, docs/security.md).

The role table says which methods a user may call; this check says which files, jobs, chats, templates,
hosts, endpoints and secrets a call may name. It runs after the role's rule and before any handler, on the
raw parameters (so a request that would fail validation later has still touched nothing):

- a path is resolved (symlinks followed) and must lie in a data folder of one of the caller's projects, or
  be read from the run folder of a job of theirs; a write only into their projects' data folders;
- a job id must be a job of their projects (else the same NOT_FOUND as for a job that does not exist);
- a key file is read only for a client on the engine's own machine; over the network the key travels by
  value or by the name of a secret an admin keeps for the project;
- an endpoint URL must be an Ember serve job of their projects on loopback, or one an admin allowed;
- a chat or template is read by its project's members and changed only by its owner (or an admin).

Admins (and users of every project) pass every rule but the key-file one: they manage the engine.
"""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from engine.api import resources as R
from engine.api.chain_spec import STAGE_MODELS, ChainStage
from engine.api.job_terms import SERVE
from engine.api.playground import ModelRef
from engine.api.protocol import FORBIDDEN, NOT_FOUND, RpcError
from engine.api.specs import JOB_KINDS
from engine.api.sweep_spec import SweepParam, SweepSpec
from engine.api.train_spec import BUILTIN_DATA, TrainSpec
from engine.daemon import projects, secrets_store, templates
from engine.daemon.access import DEFAULT_PROJECT

if TYPE_CHECKING:
    from engine.daemon.access import User
    from engine.daemon.interfaces import EngineView

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type holds (itself, or inside Optional, list, Union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def field_kind(info: Any) -> str | None:
    extra = info.json_schema_extra
    return extra.get("resource") if isinstance(extra, dict) else None


def spec_resources(model: type[BaseModel], doc: Any, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(field path, kind, value) of every resource a raw spec document names, walked by its model.

    Raw, not validated: a document that fails validation later has still been checked. Keys the model does
    not know are skipped (validation refuses them). Sweeps' varied fields and chains' stage settings are
    walked by the models they end up in.
    """
    found: list[tuple[str, str, Any]] = []
    if not isinstance(doc, dict):
        return found
    for name, value in doc.items():
        info = model.model_fields.get(name)
        if info is None:
            continue
        where = f"{prefix}{name}"
        kind = field_kind(info)
        if kind is not None:
            found.append((where, kind, value))
            continue
        for sub in _models_in(info.annotation):
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                at = f"{where}[{i}]." if isinstance(value, list) else f"{where}."
                found += spec_resources(sub, item, at)
                if sub is SweepParam and model is SweepSpec:
                    found += _swept(item, at)
                if sub is ChainStage and isinstance(item, dict) and isinstance(item.get("technique"), str) \
                        and item["technique"] in STAGE_MODELS:
                    found += spec_resources(STAGE_MODELS[item["technique"]], item.get("settings"), f"{at}settings.")
    return found


def _swept(param: Any, at: str) -> list[tuple[str, str, Any]]:
    """A sweep that varies a field naming a resource names each of its values."""
    if not isinstance(param, dict) or not isinstance(param.get("path"), str):
        return []
    kind = kind_of_field(TrainSpec, param["path"])
    values = param.get("values")
    if kind is None or not isinstance(values, list):
        return []
    return [(f"{at}values[{i}]", kind, v) for i, v in enumerate(values)]


def kind_of_field(model: type[BaseModel], dotted: str) -> str | None:
    """The resource kind of a dotted field path of ``model`` (None: names no resource, or no such field)."""
    head, _, rest = dotted.partition(".")
    info = model.model_fields.get(head)
    if info is None:
        return None
    if not rest:
        return field_kind(info)
    for sub in _models_in(info.annotation):
        kind = kind_of_field(sub, rest)
        if kind is not None:
            return kind
    return None


class ResourceCheck:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def check(self, user: User, remote: bool, method: str, params: dict[str, Any]) -> None:
        """Refuse a request that names a resource its caller may not use (before any handler runs)."""
        table = R.PARAMS.get(method, {})
        ctx = _Call(self.engine, user, remote, method)
        for name, kind in table.items():
            if kind == R.PLAIN or name not in params or params[name] is None:
                continue
            value = params[name]
            if kind == R.SPEC:
                job_kind = params.get("kind")
                spec_model = JOB_KINDS[job_kind].spec_model if isinstance(job_kind, str) and job_kind in JOB_KINDS \
                    else None  # an unknown kind (or not a name): the handler refuses it, having read nothing
                for where, sub_kind, sub_value in spec_resources(spec_model, value) if spec_model else []:
                    ctx.one(f"spec.{where}", sub_kind, sub_value)
            elif kind == R.TRAIN_SPEC:
                for where, sub_kind, sub_value in spec_resources(TrainSpec, value):
                    ctx.one(f"spec.{where}", sub_kind, sub_value)
            elif kind == R.MODEL:
                refs = [s.get("model") for s in value if isinstance(s, dict)] if isinstance(value, list) else [value]
                for ref in refs:
                    for where, sub_kind, sub_value in spec_resources(ModelRef, ref):
                        ctx.one(f"{name}.{where}", sub_kind, sub_value)
            else:
                ctx.one(name, kind, value)


class _Call:
    """One request's checks: who asks, and the engine's facts they are checked against (read once)."""

    def __init__(self, eng: EngineView, user: User, remote: bool, method: str):
        self.engine, self.user, self.remote, self.method = eng, user, remote, method
        self._projects: dict[str, Any] | None = None

    @property
    def defined(self) -> dict[str, Any]:
        if self._projects is None:
            self._projects = projects.all_projects(self.engine.store)
        return self._projects

    def one(self, where: str, kind: str, value: Any) -> None:
        if not isinstance(value, (str, list)):
            return  # not a name at all: the handler's validation refuses it
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and v:
                getattr(self, "_" + kind.replace("-", "_"))(where, v)

    # ---- each kind
    def _secret_file(self, where: str, value: str) -> None:
        if self.remote:
            raise RpcError(FORBIDDEN, f"{where}: a key file is read only for a client on the engine's machine",
                           {"field": where, "hint": "Over the network, send the key itself (api_key) or name a "
                                                    "secret an admin keeps for your project (api_key_secret; "
                                                    "ember secrets list)."})

    def _program(self, where: str, value: str) -> None:
        if not self.user.sees_all:
            raise RpcError(FORBIDDEN, f"{where}: {self.user.name} may not choose a program for the engine to run",
                           {"field": where, "hint": "Leave it empty (the engine's own), or ask an admin."})

    def _read(self, where: str, value: str) -> None:
        self._path(where, value, write=False)

    def _write(self, where: str, value: str) -> None:
        self._path(where, value, write=True)

    def _name_or_path(self, where: str, value: str) -> None:
        if value in BUILTIN_DATA or not _looks_like_path(value):
            return  # a built-in dataset or a Hub id: nothing on disk is named
        self._path(where, value, write=False)

    def _path(self, where: str, value: str, write: bool) -> None:
        if self.user.sees_all:
            return
        try:
            resolved = Path(value).expanduser().resolve()  # symlinks followed: where the bytes really are
        except (OSError, RuntimeError, ValueError):
            resolved = None
        if resolved is not None:
            owner = projects.owner_of(self.defined, resolved)
            if owner is not None and owner in self.user.projects:
                return
            if not write and self._in_own_run(resolved):
                return
        # One answer for another project's file and for a file of no project: nothing is confirmed.
        verb = "write" if write else "read"
        raise RpcError(FORBIDDEN, f"{where}: {self.user.name} may not {verb} {value}",
                       {"field": where, "hint": f"Name a file in a data folder of your projects ({', '.join(self.user.projects) or 'none'}"
                                                f"){'' if write else ' or in one of their runs'}; projects.list "
                                                "shows the folders. An admin can add a folder (ember projects set)."})

    def _in_own_run(self, resolved: Path) -> bool:
        runs = self.engine.paths.runs.resolve()
        if runs not in resolved.parents:
            return False
        job_id = resolved.relative_to(runs).parts[0]
        project = self.engine.access.project_of(job_id)
        return project is not None and project in self.user.projects

    def _run(self, where: str, value: str) -> None:
        if self.user.sees_all:
            return
        project = self.engine.access.project_of(value)
        if project is None or project not in self.user.projects:
            raise RpcError(NOT_FOUND, f"No job {value!r}",
                           {"field": where, "hint": "jobs.list shows the jobs you can see."})

    def _topics(self, where: str, value: str) -> None:
        """Any glob may be asked for: each event is filtered by who may see it (Access.topic_visible)."""

    def _project(self, where: str, value: str) -> None:
        if not self.user.sees_all and value not in self.user.projects:
            raise RpcError(FORBIDDEN, f"{self.user.name} does not belong to project {value!r}",
                           {"field": where, "hint": f"Your projects: {', '.join(self.user.projects) or 'none'}."})

    def _host(self, where: str, value: str) -> None:
        if self.user.sees_all or value == "local":
            return
        given = projects.host_projects(self.defined, value)
        if given and not given & set(self.user.projects):
            raise RpcError(NOT_FOUND, f"No host {value!r}",
                           {"field": where, "hint": "hosts.list shows the hosts you can use."})

    def _request(self, where: str, value: str) -> None:
        owner = self.engine.access.request_owner(value)
        if not self.user.sees_all and owner != self.user.name:
            raise RpcError(NOT_FOUND, f"No answer {value!r} in progress",
                           {"field": where, "hint": "Only your own answers can be stopped."})

    def _chat(self, where: str, value: str) -> None:
        row = self.engine.store.get_conversation(value)
        if row is None:
            return  # a new id (save) or none (get, delete): the handler says so
        data = row["data"] if isinstance(row["data"], dict) else {}
        self._owned(where, f"saved chat {value!r}", data.get("owner"), data.get("project"))

    def _template(self, where: str, value: str) -> None:
        owner, project = templates.owner_of(self.engine.store, value)
        if owner is None and project is None and not templates.exists(self.engine.paths.home / "templates", value):
            return
        self._owned(where, f"template {value!r}", owner, project)

    def _owned(self, where: str, what: str, owner: str | None, project: str | None) -> None:
        """A chat or template: its project's members see it; its owner (or an admin) changes it."""
        if self.user.sees_all:
            return
        if (project or DEFAULT_PROJECT) not in self.user.projects:
            raise RpcError(NOT_FOUND, f"No {what}", {"field": where, "hint": "Only your projects' are listed."})
        if self.method in R.OWNER_ONLY and owner != self.user.name:
            raise RpcError(FORBIDDEN, f"{self.user.name} may not change {what}: it is {owner or 'nobody'}'s",
                           {"field": where, "hint": "Save it under another name, or ask its owner or an admin."})

    def _url(self, where: str, value: str) -> None:
        if self.user.sees_all:
            return
        if value.rstrip("/") in self._project_endpoints() or _same_endpoint(value, self._served_urls()):
            return
        raise RpcError(FORBIDDEN, f"{where}: {self.user.name} may not send requests to {value}",
                       {"field": where, "hint": "Chat with a serve job of your project (its URL on this engine's "
                                                "machine), or ask an admin to allow this endpoint for your project "
                                                "(ember projects set NAME --endpoint URL, with its folders and hosts)."})

    def _secret(self, where: str, value: str) -> None:
        if self.user.sees_all:
            return
        if not any(secrets_store.has(self.engine.store, p, value) for p in self.user.projects):
            raise RpcError(NOT_FOUND, f"No secret {value!r} in your projects",
                           {"field": where, "hint": "ember secrets list shows your projects' secrets; an admin "
                                                    "adds them."})

    # ---- endpoints a non-admin may call
    def _project_endpoints(self) -> set[str]:
        return {str(u).rstrip("/") for p in self.user.projects for u in self.defined.get(p, {}).get("endpoints", [])}

    def _served_urls(self) -> list[str]:
        """The URLs Ember serve jobs of the caller's projects serve now (their ``serving`` events)."""
        urls = []
        store = self.engine.store
        for job in store.list_jobs(state=("running",), kind=SERVE, limit=1000):
            if (job.get("project") or DEFAULT_PROJECT) not in self.user.projects:
                continue
            for _seq, _topic, _t, data in store.query_events([f"run/{job['id']}/serving"], 0, None, 1000)[-1:]:
                url = json.loads(data).get("url")
                if url:
                    urls.append(str(url))
        return urls


def _looks_like_path(value: str) -> bool:
    """A path when it is written as one, or names something in the engine's folder; else a name (a Hub id)."""
    return value.startswith(("/", "~", ".", os.sep)) or Path(value).exists()


def _same_endpoint(url: str, served: list[str]) -> bool:
    """``url`` reaches one of ``served`` on loopback: the same port, under its /v1."""
    asked = urlsplit(url)
    if asked.hostname not in LOOPBACK:
        return False
    for s in served:
        got = urlsplit(s)
        if got.hostname in LOOPBACK and got.port == asked.port and asked.path.rstrip("/").startswith(
                got.path.rstrip("/")):
            return True
    return False
