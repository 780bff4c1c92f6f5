"""Every resource a request names is checked against the caller's projects (engine/api/resources.py,
engine/daemon/resource_check.py): generated from the method table, so a new method or spec field is covered
the day it is declared; then each hole found by a hostile operator, reproduced as it was found."""

from __future__ import annotations

import http.server
import re
import threading
import typing
from pathlib import Path
from unittest.mock import MagicMock

import pytest
from pydantic import BaseModel

from engine.api import resources as R
from engine.api.permissions import ROLES, RULES, allowed
from engine.api.playground import ModelRef
from engine.api.protocol import FORBIDDEN, INVALID_PARAMS, NOT_FOUND, RpcError
from engine.api.specs import JOB_KINDS
from engine.api.train_spec import TrainSpec
from engine.cli.client import BlockingClient
from engine.daemon import handlers as handlers_mod
from engine.daemon.resource_check import field_kind, spec_resources
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process, wait_for

pytestmark = pytest.mark.timeout(300)
ALLOWED_ENDPOINT = "http://127.0.0.1:9/v1"  # an admin allowed it for project alpha

PATHLIKE = re.compile(r"(path|file|dir|folder|_run|^run$|url|output|python|_of$|^code$|^data$|^model$|key|host|cluster)")
# Spec fields whose names look like a resource and are not one (each says why).
NOT_RESOURCES = {
    ("SweepParam", "path"),  # a dotted spec field such as optim.lr
    ("ModelRef", "api_key"),  # the key's value itself, never kept
    ("ModelRef", "api_key_secret"),  # marked as a secret's name: checked as kind secret
    ("ModelSpec", "code_sha256"), ("ModelSpec", "code_entry"),  # what the confirmed file holds
    ("PiiScrubSpec", "output_format"),
    ("DistributedSpec", "rdzv_host"),  # where a job's own processes meet (node 0 of hosts checked as host)
}


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for info in model.model_fields.values():
        stack = [info.annotation]
        while stack:
            ann = stack.pop()
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                _models(ann, seen)
            stack += list(typing.get_args(ann))


def test_every_method_declares_every_parameter_and_the_engine_refuses_to_start_otherwise():
    assert set(R.PARAMS) == set(RULES), "a method without a resource table (or a table without a method)"
    assert all(kind in R.KINDS for table in R.PARAMS.values() for kind in table.values())
    eng = MagicMock()
    h = handlers_mod
    areas = [h.StatusHandlers(eng), h.DataHandlers(eng), h.EventHandlers(eng), h.AuditHandlers(eng),
             h.QueueHandlers(eng), h.HostHandlers(eng), h.ModelHandlers(eng), h.PlaygroundHandlers(eng),
             h.EvaluationHandlers(eng), h.ChatHandlers(eng), h.PrivacyHandlers(eng), h.UserHandlers(eng),
             h.SecretHandlers(eng), h.JobHandlers(eng, None)]
    table = {m: entry for area in areas for m, entry in area.table().items()}
    h.undeclared(table)  # the real handlers: every parameter declared
    model, fn = table["jobs.get"]

    class Wider(model):  # a new parameter nobody classified
        where: str | None = None

    with pytest.raises(RuntimeError, match=r"jobs.get: \['where'\]"):
        h.undeclared({**table, "jobs.get": (Wider, fn)})
    with pytest.raises(RuntimeError, match="new.method"):
        h.undeclared({**table, "new.method": (model, fn)})


def test_every_spec_field_that_looks_like_a_resource_says_which_kind():
    seen: set[type[BaseModel]] = set()
    for kind in JOB_KINDS.values():
        _models(kind.spec_model, seen)
    _models(ModelRef, seen)
    unmarked = [(m.__name__, name) for m in seen for name, info in m.model_fields.items()
                if PATHLIKE.search(name) and field_kind(info) is None
                and not any(issubclass(a, BaseModel) for a in _flat(info.annotation))
                and (m.__name__, name) not in NOT_RESOURCES and _is_text(info.annotation)]
    assert not unmarked, f"mark these with json_schema_extra=resource(KIND), or list them in NOT_RESOURCES: {unmarked}"


def _flat(ann: typing.Any) -> list[type]:
    out = [ann] if isinstance(ann, type) else []
    for a in typing.get_args(ann):
        out += _flat(a)
    return out


def _is_text(ann: typing.Any) -> bool:
    return str in _flat(ann)


def _resource_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """Every (field path, kind) a spec model can name, through nested models (a list's first item)."""
    out = []
    for name, info in model.model_fields.items():
        kind = field_kind(info)
        if kind is not None:
            out.append(((*prefix, name), kind))
            continue
        for sub in {a for a in _flat(info.annotation) if issubclass(a, BaseModel)}:
            listed = list in _flat(info.annotation) or typing.get_origin(info.annotation) is list or \
                any(typing.get_origin(a) is list for a in typing.get_args(info.annotation))
            out += _resource_paths(sub, (*prefix, name, *(("0",) if listed else ())))
    return out


def _doc(path: tuple[str, ...], value: typing.Any) -> typing.Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if head == "0":
        return [_doc(rest, value)]
    return {head: _doc(rest, value)}


# ---- one engine with two projects, for the generated suite and the regression tests
@pytest.fixture(scope="module")
def team(tmp_path_factory):
    from engine.api import paths as paths_mod

    root = tmp_path_factory.mktemp("team")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_HOME", str(root / "home"))
        mp.setenv("EMBER_SSH_KNOWN_HOSTS", "")
        mp.delenv("EMBER_RUNTIME_DIR", raising=False)
        home = paths_mod.resolve()
        yield from _team(root, home)


def _team(root: Path, home: typing.Any):
    alpha, beta, outside = root / "alpha", root / "beta", root / "outside"
    for folder in (alpha, beta, outside):
        folder.mkdir()
    (alpha / "tickets.csv").write_text("text,label\nhello,a\nbye,b\n")
    (beta / "secret.csv").write_text("text,label\nbeta only,a\n")
    (outside / "shadow").write_text("root:$6$not-a-real-hash:19000:0:99999:7:::\nline two\n")
    (alpha / "link.csv").symlink_to(beta / "secret.csv")  # inside alpha's folder, its bytes in beta's
    eng = RunningEngine(home, start_engine_process(home, "--listen", "127.0.0.1:0"))
    try:
        with eng.client("admin") as admin:
            admin.call("projects.set", name="alpha", data_folders=[str(alpha)], endpoints=[ALLOWED_ENDPOINT])
            admin.call("projects.set", name="beta", data_folders=[str(beta)])
            tokens = {role: admin.call("users.add", name=f"{role}-a", role=role, projects=["alpha"])["token"]
                      for role in ROLES}
            beta_job = admin.call("jobs.start", kind="system.probe", spec={}, project="beta")["id"]
            alpha_job = admin.call("jobs.start", kind="system.probe", spec={}, project="alpha")["id"]
            for job_id in (beta_job, alpha_job):
                wait_for(lambda j=job_id: admin.call("jobs.get", id=j)["state"] == "succeeded", timeout=60, what=job_id)
            beta_chat = admin.call("chats.save", sides=[{"model": {"builtin": "smollm2-135m-instruct"},
                                                                "messages": []}])["id"]
            tls = admin.call("engine.status")["tls"]
        yield eng, {"alpha": alpha, "beta": beta, "outside": outside, "beta_job": beta_job, "alpha_job": alpha_job,
                    "beta_chat": beta_chat, "tokens": tokens, "tls": tls, "runs": home.runs}
    finally:
        eng.stop()
        kill_job_groups(home.home)


def _as(eng: RunningEngine, token: str) -> BlockingClient:
    return BlockingClient.connect(eng.paths, client="attacker", token=token)


def _values(kind: str, f: dict[str, typing.Any]) -> tuple[typing.Any, typing.Any, typing.Any] | None:
    """(another project's, outside every project, one's own) for a kind; None: not checked by value."""
    beta_run_file = str(f["runs"] / f["beta_job"] / "events.jsonl")
    return {
        R.READ: (str(f["beta"] / "secret.csv"), str(f["outside"] / "shadow"), str(f["alpha"] / "tickets.csv")),
        R.NAME_OR_PATH: (beta_run_file, str(f["outside"] / "shadow"), str(f["alpha"] / "tickets.csv")),
        R.WRITE: (str(f["beta"] / "copy.csv"), str(f["outside"] / "copy.csv"), str(f["alpha"] / "copy.csv")),
        R.RUN: (f["beta_job"], "no-such-job", f["alpha_job"]),
    }.get(kind)


def _calls(method: str) -> list[tuple[str, str, typing.Callable[[typing.Any], dict[str, typing.Any]]]]:
    """(where, kind, value -> params) for each resource ``method`` names, specs walked field by field."""
    out = []
    for param, kind in R.resources_of(method).items():
        if kind == R.SPEC:
            for job_kind, spec_kind in JOB_KINDS.items():
                for path, sub in _resource_paths(spec_kind.spec_model):
                    out.append((f"{job_kind}:{'.'.join(path)}", sub,
                                lambda v, k=job_kind, p=path: {"kind": k, "spec": _doc(p, v)}))
        elif kind == R.TRAIN_SPEC:
            for path, sub in _resource_paths(TrainSpec):
                out.append((".".join(path), sub, lambda v, p=path: {"spec": _doc(p, v)}))
        elif kind == R.MODEL:
            for path, sub in _resource_paths(ModelRef):
                wrap = (lambda v, p=path, q=param: {q: [{"model": _doc(p, v)}]}) if method == "chats.save" \
                    else (lambda v, p=path, q=param: {q: _doc(p, v)})
                out.append((".".join(path), sub, wrap))
        else:
            out.append((param, kind, lambda v, q=param: {q: v}))
    return out


def test_each_role_is_refused_another_projects_resources_and_the_same_for_none(team):
    """For every method, every declared resource (spec fields included) and every role: a value of another
    project and one outside every project get the same refusal; one's own passes the check (the call then
    stops at an unknown parameter, so nothing is done)."""
    eng, f = team
    checked = 0
    for role in ("viewer", "operator"):
        with _as(eng, f["tokens"][role]) as c:
            for method in sorted(R.PARAMS):
                for where, kind, build in _calls(method):
                    values = _values(kind, f)
                    if values is None:
                        continue
                    answers = []
                    for value in values:
                        with pytest.raises(RpcError) as err:
                            c.call(method, **build(value), not_a_param=1)
                        answers.append(err.value)
                    cross, outside, own = answers
                    if not allowed(role, method):
                        assert cross.code == outside.code == own.code == FORBIDDEN, (role, method)
                        continue
                    what = (role, method, where, kind)
                    assert cross.code in (FORBIDDEN, NOT_FOUND), (*what, cross.code, cross.message)
                    assert outside.code == cross.code, (*what, outside.message, cross.message)
                    same = [a.message.replace(str(v), "VALUE") for a, v in zip(answers[:2], values[:2], strict=True)]
                    assert same[0] == same[1], (*what, same)
                    assert own.code == INVALID_PARAMS, (*what, own.code, own.message)  # past the check
                    checked += 1
    assert checked > 60  # the table really was walked (methods x resources x two roles)


def test_a_symlink_into_another_projects_folder_is_refused(team):
    eng, f = team
    with _as(eng, f["tokens"]["operator"]) as c, pytest.raises(RpcError) as err:
        c.call("data.inspect", spec={"task": "text_classification", "data": {"path": str(f["alpha"] / "link.csv")}})
    assert err.value.code == FORBIDDEN and "may not read" in err.value.message


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: typing.ClassVar[list[str]] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append(f"{self.path} {self.headers.get('Authorization')}")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"data": [{"id": "m"}]}')

    def log_message(self, *_args):
        pass


@pytest.fixture
def listener():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_no_file_is_read_and_no_request_sent_for_a_remote_operator(team, listener, tmp_path):
    """The hole as found: playground.chat {url: <any>, api_key_file: <any path>} over TLS made the engine read
    the file and send it as a Bearer header to the caller's URL; now neither happens, for an admin too."""
    eng, f = team
    tls = f["tls"]
    for role in ("operator", "admin"):
        with BlockingClient.connect_tls(tls["listen"], f["tokens"][role], _known(tmp_path), accept=tls["fingerprint"],
                                        client="attacker") as c:
            for key_file in (str(f["outside"] / "shadow"), str(eng.paths.home / "tls" / "key.pem"),
                             str(eng.paths.token)):
                with pytest.raises(RpcError) as err:
                    c.call("playground.chat", model={"url": listener, "api_key_file": key_file},
                           messages=[{"role": "user", "content": "hi"}])
                m = err.value.message  # an operator is refused the URL first; an admin the key file
                assert err.value.code == FORBIDDEN and ("key file" in m or role == "operator" and "may not send" in m), m
                assert "not-a-real-hash" not in str(err.value.data)
            with pytest.raises(RpcError) as err:  # a served endpoint's key file, for a serve job
                c.call("jobs.start", kind="serve.model", spec={"model": {"builtin": "smollm2-135m-instruct"},
                                                               "api_key_file": str(f["outside"] / "shadow")})
            assert err.value.code == FORBIDDEN
    with BlockingClient.connect_tls(tls["listen"], f["tokens"]["operator"], _known(tmp_path),
                                    accept=tls["fingerprint"]) as c:
        # Server-side request forgery: an operator may not make the engine call an address of their choosing.
        with pytest.raises(RpcError) as err:
            c.call("playground.chat", model={"url": listener, "api_key": "sk-test"},
                   messages=[{"role": "user", "content": "hi"}])
        assert err.value.code == FORBIDDEN and "may not send requests" in err.value.message
    assert _Recorder.seen == []


def _known(tmp_path: Path):
    from engine.api.remote_engine import KnownEngines

    return KnownEngines(tmp_path / "known.json")


def test_a_key_file_that_is_not_a_key_is_refused_without_its_contents(tmp_path):
    from engine.daemon.endpoint_chat import read_key
    from engine.training.context import JobFailed

    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$secret-hash:19000\nbin:*:19000\n")
    with pytest.raises(JobFailed) as err:
        read_key(str(shadow))
    assert "secret-hash" not in str(err.value) and "bin:" not in str(err.value)
    key = tmp_path / "key"
    key.write_text("sk-abc123\n")
    assert read_key(str(key)) == "sk-abc123"


def test_the_other_holes_as_they_were_found(team):
    """Another project's run by id or path in each method that took one, its chats, its run folder's files, a
    write into its folder: each refused for an operator of alpha."""
    eng, f = team
    beta_job, beta_dir = f["beta_job"], f["runs"] / f["beta_job"]
    attempts = {
        "playground.chat": {"model": {"run": beta_job}, "messages": [{"role": "user", "content": "hi"}]},
        "export.model": {"kind": "export.model", "spec": {"source_run": beta_job}},
        "evaluate.model": {"kind": "evaluate.model", "spec": {"model": {"builtin": "smollm2-135m-instruct"},
                                                               "validation_of": beta_job}},
        "serve.model": {"kind": "serve.model", "spec": {"model": {"run": beta_job}}},
        "train.finetune": {"kind": "train.finetune", "spec": {"task": "causal_lm", "model": {"path": str(beta_dir)}}},
        "distill": {"kind": "train.finetune", "spec": {"distill": {"teacher_run": beta_job}}},
        "pii.scrub": {"kind": "pii.scrub", "spec": {"path": str(f["alpha"] / "tickets.csv"),
                                                    "output": str(f["beta"] / "stolen.csv")}},
    }
    with _as(eng, f["tokens"]["operator"]) as c:
        for what, params in attempts.items():
            method = "playground.chat" if what == "playground.chat" else "jobs.start"
            with pytest.raises(RpcError) as err:
                c.call(method, **params)
            assert err.value.code in (FORBIDDEN, NOT_FOUND), (what, err.value.message)
        for method in ("evaluations.list", "jobs.get", "jobs.logs"):
            with pytest.raises(RpcError) as err:
                c.call(method, id=beta_job)
            assert err.value.code == NOT_FOUND
        with pytest.raises(RpcError) as err:
            c.call("data.inspect", spec={"task": "text_classification", "data": {"path": str(beta_dir / "spec.yaml")}})
        assert err.value.code == FORBIDDEN
        for method in ("chats.get", "chats.delete"):
            with pytest.raises(RpcError) as err:
                c.call(method, id=f["beta_chat"])
            assert err.value.code == NOT_FOUND
        assert f["beta_chat"] not in str(c.call("chats.list"))
        queue = c.call("queue.get")
        assert all(j["id"] != beta_job for j in queue["jobs"] + queue["running"])
        # A chat with an endpoint an admin allowed: saved, without its key
        mine = c.call("chats.save", sides=[{"model": {"url": ALLOWED_ENDPOINT, "api_key": "sk-x"},
                                                    "messages": []}])["id"]
        assert "sk-x" not in str(c.call("chats.get", id=mine))  # a key is never kept
    with eng.client("admin") as admin:
        assert admin.call("chats.get", id=mine)["id"] == mine


def test_saved_templates_belong_to_their_owner(team):
    eng, f = team
    with eng.client("admin") as admin:
        admin.call("templates.save", name="beta-recipe", kind="system.probe", spec={})
        admin.call("users.add", name="op2-a", role="operator", projects=["alpha"])
    with _as(eng, f["tokens"]["operator"]) as c:
        assert all(t["name"] != "beta-recipe" for t in c.call("templates.list")["templates"])
        with pytest.raises(RpcError) as err:
            c.call("templates.delete", name="beta-recipe")
        assert err.value.code == NOT_FOUND
        c.call("templates.save", name="alpha-recipe", kind="system.probe", spec={})
        assert any(t["name"] == "alpha-recipe" and t["owner"] == "operator-a"
                   for t in c.call("templates.list")["templates"])
    with _as(eng, f["tokens"]["viewer"]) as v:
        assert any(t["name"] == "alpha-recipe" for t in v.call("templates.list")["templates"])


def test_answers_hosts_and_the_queue_reach_only_those_who_may_see_them(team):
    """Access.event_view on the engine's real store: a Playground answer streams to whoever asked only."""
    eng, f = team
    from engine.daemon.access import Access, User
    from engine.daemon.store import Store

    store = Store(eng.paths.db)
    try:
        access = Access(store)
        alice, bob = User("alice", "viewer", ("alpha",)), User("bob", "operator", ("alpha",))
        access.note_request("r1", bob)
        assert access.event_view(bob, "playground/r1", '{"text":"hi"}') == '{"text":"hi"}'
        assert access.event_view(alice, "playground/r1", '{"text":"hi"}') is None
        assert access.event_view(alice, "playground/unknown", '{"text":"hi"}') is None
        queue = {"jobs": [{"id": f["beta_job"]}, {"id": f["alpha_job"]}], "running": [], "resources": {}}
        import json

        shown = json.loads(access.event_view(alice, "queue", json.dumps(queue)))
        assert [j["id"] for j in shown["jobs"]] == [f["alpha_job"]]
        assert access.event_view(alice, f"run/{f['beta_job']}/train", "{}") is None
        assert access.event_view(alice, "jobs", json.dumps({"id": f["beta_job"]})) is None
    finally:
        store.close()


def test_spec_walk_finds_swept_and_nested_resources():
    found = spec_resources(JOB_KINDS["train.sweep"].spec_model, {
        "base": {"data": {"path": "/x/train.csv"}},
        "params": [{"path": "data.val_path", "values": ["/y/a.csv", "/y/b.csv"]}, {"path": "optim.lr", "values": [1]}]})
    assert ("base.data.path", R.READ, "/x/train.csv") in found
    assert [v for w, _k, v in found if w.startswith("params")] == ["/y/a.csv", "/y/b.csv"]
