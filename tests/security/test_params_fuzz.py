"""Every method's params, generated from its pydantic model, against a real engine on a throwaway home.

Right keys with wrong types, out-of-range numbers, huge and unicode strings, nested junk, extra keys:
the engine answers each with a result or a structured error (INVALID_PARAMS with data.fields), never an
internal error, and keeps serving. State-changing methods run too; what they create is undone at once
(a queued job is cancelled, an added host removed), and nothing that would stop the engine is sent valid.
"""

from __future__ import annotations

import json
import socket
import types
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import protocol
from engine.api.paths import read_token
from engine.daemon.handlers import Handlers
from tests.conftest import kill_job_groups, start_engine_process

pytestmark = pytest.mark.timeout(300)

TABLE = Handlers(types.SimpleNamespace(hosts=None)).table  # only to read each method's params model
BACKGROUND = {"jobs.check", "data.preview", "data.inspect", "models.inspect", "estimate.fit", "estimate.plan"}  # a subprocess each
NEVER_VALID = {"engine.shutdown", "diag.burst"}  # valid params would stop the engine or flood it: extra key added

huge = st.sampled_from(["x" * 70_000, "ü" * 20_000, "\u202e" * 100, "💥" * 1000, "\x00\x01\x7f", "'; DROP TABLE runs;--",
                        "../../../../etc/passwd", "$(touch PWNED)", "%s%n%x", "\ud7ff\ue000"])
numbers = st.sampled_from([-1, 0, 1, 2**31, 2**63, -(2**63) - 1, 10**30, 1e308, -1e308, 0.5, -0.0])
scalars = st.none() | st.booleans() | numbers | st.integers() | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=30) | huge
junk = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                    max_leaves=10)


def _valid_ish(annotation: Any) -> st.SearchStrategy:
    """A value of roughly the right type (so deeper checks are reached), mixed with junk."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[_valid_ish(a) for a in typing.get_args(annotation)])
    if annotation is int:
        return st.integers(-5, 200) | numbers
    if annotation is bool:
        return st.booleans()
    if annotation is str:
        return st.text(max_size=20) | st.sampled_from(["ping", "system.probe", "train.finetune", "r1", "box"]) | huge
    if annotation is type(None):
        return st.none()
    if origin is list:
        return st.lists(st.text(max_size=12) | st.sampled_from(["jobs", "run/*", "*"]), max_size=4)
    if origin is dict or annotation is dict:
        return st.dictionaries(st.sampled_from(["samples", "interval_s", "task", "data", "name", "address", "port",
                                                "method", "max_steps", "device", "path"]) | st.text(max_size=8),
                               junk, max_size=4)
    return junk


def params_for(method: str) -> st.SearchStrategy:
    model = TABLE[method][0]
    fields = {name: (_valid_ish(f.annotation) | junk) for name, f in model.model_fields.items()}
    base = st.fixed_dictionaries({}, optional=fields) if fields else st.just({})
    extra = st.dictionaries(st.text(min_size=1, max_size=10).filter(lambda k: k not in fields), junk,
                            min_size=1 if method in NEVER_VALID else 0, max_size=2)
    return st.builds(lambda a, b: {**a, **b}, base, extra)


FOREGROUND = sorted(m for m in TABLE if m not in BACKGROUND)
requests = st.sampled_from(FOREGROUND).flatmap(lambda m: st.tuples(st.just(m), params_for(m)))


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_HOME", str(tmp_path_factory.mktemp("fuzz") / "home"))
    mp.setenv("EMBER_SSH_KNOWN_HOSTS", "")
    mp.delenv("EMBER_RUNTIME_DIR", raising=False)
    from engine.api import paths as paths_mod

    p = paths_mod.resolve()
    proc = start_engine_process(p)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(str(p.socket))
    f = s.makefile("rb")
    s.sendall(protocol.encode(protocol.request(0, "hello", {"token": read_token(p), "client": "fuzz"})))
    assert "result" in json.loads(f.readline())
    state = {"s": s, "f": f, "proc": proc, "id": 0, "seen": {}}
    yield state
    s.close()
    proc.terminate()
    proc.wait(10)
    kill_job_groups(p.home)
    log = (p.home / "engine.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    mp.undo()


def call(c: dict, method: str, params: dict) -> dict:
    c["id"] += 1
    c["s"].sendall(protocol.encode({"jsonrpc": "2.0", "id": c["id"], "method": method, "params": params}))
    while True:
        reply = json.loads(c["f"].readline())
        if "id" in reply:  # events of a subscription the fuzz made are skipped
            break
    assert reply["id"] == c["id"]
    assert ("result" in reply) != ("error" in reply)
    if "error" in reply:
        err = reply["error"]
        assert isinstance(err["code"], int) and isinstance(err["message"], str) and err["message"]
        assert err["code"] != protocol.INTERNAL_ERROR, (method, params, err)
        # Ember's own sentence (data.detail on the wire), as the clients show it.
        if err["code"] == protocol.INVALID_PARAMS and protocol.RpcError.from_json(err).message.startswith(
                "Invalid params"):
            fields = err["data"]["fields"]
            assert fields and all(f["field"] and f["message"] for f in fields)
    c["seen"].setdefault(method, set()).add("error" if "error" in reply else "ok")
    assert c["proc"].poll() is None, f"engine died on {method} {params!r:.300}"
    return reply


def undo(c: dict, method: str, params: dict, reply: dict) -> None:
    """Whatever a valid state-changing request made is removed again."""
    if "result" not in reply:
        return
    res = reply["result"]
    if method in ("jobs.start", "jobs.resume"):
        call(c, "jobs.cancel", {"id": res["id"]})
    elif method in ("hosts.add", "hosts.update"):
        call(c, "hosts.remove", {"name": res["name"]})
    elif method == "subscribe":
        call(c, "unsubscribe", {"subscription": res["subscription"]})
    elif method == "pii.set_policy":
        which = {"folder": params["folder"]} if params.get("folder") is not None else {"project": params["project"]}
        call(c, "pii.set_policy", which | {"clear": True})


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(req=requests)
def test_generated_params_get_structured_replies(conn, req):
    method, params = req
    undo(conn, method, params, call(conn, method, params))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(req=st.sampled_from(sorted(BACKGROUND)).flatmap(lambda m: st.tuples(st.just(m), params_for(m))))
def test_input_checks_in_a_subprocess_answer_junk_specs(conn, req):
    method, params = req
    call(conn, method, params)


def test_targeted_bad_inputs(conn):
    """Shapes the generator may miss: the engine refuses each with the field named."""
    cases = [
        ("jobs.start", {"kind": "system.probe", "spec": {"samples": -1, "interval_s": "soon"}}, {"samples", "interval_s"}),
        ("jobs.start", {"kind": "train.finetune", "spec": {"batch_size": 10**30, "data": {"path": ["x"]}}},
         {"batch_size", "data.path"}),
        ("jobs.start", {"kind": "no.such.kind", "spec": {}}, {"kind"}),
        ("jobs.start", {"kind": "train.finetune", "spec": {"distributed": {"nodes": [{"host": "$(id)"}]}}},
         {"distributed.nodes.0.host"}),
        ("hosts.add", {"host": {"name": "a b", "address": "-oProxyCommand=touch PWNED", "port": 0}},
         {"name", "address", "port"}),
        ("jobs.list", {"limit": 10**12}, {"limit"}),
        ("events.query", {"topics": [], "since": -5}, {"topics", "since"}),
    ]
    for method, params, fields in cases:
        err = call(conn, method, params)["error"]
        assert err["code"] == protocol.INVALID_PARAMS, (method, err)
        assert {f["field"] for f in err["data"]["fields"]} == fields, (method, err["data"]["fields"])
    # A template name longer than a file name may be: refused by its length, not by the filesystem (the
    # access check looks a template up before the params are read).
    for method, params in (("templates.delete", {}), ("templates.save", {"spec": {}})):
        err = call(conn, method, {"name": "x" * 5000, **params})["error"]
        assert err["code"] == protocol.INVALID_PARAMS, err
    ok = call(conn, "jobs.start", {"kind": "system.probe", "spec": {}, "name": "ü $(touch PWNED) `id`"})
    assert ok["result"]["name"] == "ü $(touch PWNED) `id`"
    call(conn, "jobs.cancel", {"id": ok["result"]["id"]})
    assert call(conn, "ping", {})["result"]["t"] > 0
