"""Users, roles and projects, enforced by the engine (engine/daemon/access.py, engine/api/permissions.py):
every method has a rule and each role gets exactly what the table says; a user sees only their projects'
jobs and events; wrong, revoked and expired tokens are refused; the audit log says who did what."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.api import protocol
from engine.api.permissions import ADMIN, JOB_METHODS, ROLES, RULES, allowed
from engine.api.protocol import FORBIDDEN, INVALID_PARAMS, NOT_FOUND, UNAUTHORIZED, RpcError
from engine.cli.client import BlockingClient
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(180)


def test_every_protocol_method_has_exactly_one_permission_rule():
    """A new method without a rule fails here (and the engine refuses it to everyone)."""
    assert set(RULES) == set(protocol.METHODS) - {"hello"}
    assert set(RULES.values()) <= set(ROLES)
    assert JOB_METHODS <= set(RULES)
    assert not allowed("viewer", "no.such.method") and not allowed("guest", "ping")


def _as(engine_proc, token: str, name: str = "t") -> BlockingClient:
    return BlockingClient.connect(engine_proc.paths, client=name, token=token)


def test_each_role_may_call_exactly_what_the_table_says(engine_proc):
    with engine_proc.client("admin") as admin:
        tokens = {role: admin.call("users.add", name=f"u-{role}", role=role, projects=["p"])["token"]
                  for role in ROLES}
    for role in ROLES:
        with _as(engine_proc, tokens[role], role) as c:
            assert c.server["user"] == {"name": f"u-{role}", "role": role, "projects": ["p"]}
            for method in sorted(RULES):
                # A parameter no method takes: an allowed call is refused for it (INVALID_PARAMS) and does
                # nothing, a forbidden one is refused for the role first.
                with pytest.raises(RpcError) as err:
                    c.call(method, not_a_param=1)
                expected = INVALID_PARAMS if allowed(role, method) else FORBIDDEN
                assert err.value.code == expected, (role, method, err.value.message)
                if expected == FORBIDDEN:
                    assert f"({role}) may not call {method}: it needs {RULES[method]}" in err.value.message


def _finish(c, job_id):
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in ("succeeded", "failed") and j,
                    timeout=60, interval=0.2, what=f"job {job_id}")


def test_users_see_only_their_projects_and_the_audit_log_names_them(engine_proc):
    with engine_proc.client("admin") as admin:
        alice = admin.call("users.add", name="alice", role="operator", projects=["vision"])["token"]
        bob = admin.call("users.add", name="bob", role="operator", projects=["nlp"])["token"]
        carol = admin.call("users.add", name="carol", role="viewer", projects=["vision"])["token"]
        mine = admin.call("jobs.start", kind="system.probe", spec={}, name="admin's", project="ops")["id"]
    with _as(engine_proc, alice, "gui-a") as a, _as(engine_proc, bob, "gui-b") as b, \
            _as(engine_proc, carol, "gui-c") as viewer:
        b.subscribe(["jobs", "run/*"], since=0)
        job = a.call("jobs.start", kind="system.probe", spec={}, name="alice's")
        assert job["owner"] == "alice" and job["project"] == "vision"
        _finish(a, job["id"])
        with pytest.raises(RpcError) as err:
            a.call("jobs.start", kind="system.probe", spec={}, project="nlp")
        assert err.value.code == FORBIDDEN and "does not belong to project 'nlp'" in err.value.message

        assert [j["id"] for j in a.call("jobs.list")["jobs"]] == [job["id"]]
        assert [j["id"] for j in viewer.call("jobs.list")["jobs"]] == [job["id"]]
        assert b.call("jobs.list")["jobs"] == []
        for other, job_id in ((b, job["id"]), (a, mine)):
            for method in ("jobs.get", "jobs.logs", "jobs.stop", "jobs.delete"):
                with pytest.raises(RpcError) as err:
                    other.call(method, id=job_id)
                assert err.value.code == NOT_FOUND, method  # the same as a job that does not exist
        with pytest.raises(RpcError) as err:
            viewer.call("jobs.stop", id=job["id"])
        assert err.value.code == FORBIDDEN
        time.sleep(0.5)
        seen = {e["topic"] for e in b.events(timeout=0.5)}
        assert not any(job["id"] in t for t in seen) and not any(mine in t for t in seen)
        assert all(job["id"] not in str(e) for e in b.call("events.query", topics=["jobs", "run/*"])["events"])
        assert a.call("events.query", topics=[f"run/{job['id']}/*"])["events"]

    with engine_proc.client("admin") as admin:
        assert {j["id"] for j in admin.call("jobs.list")["jobs"]} == {job["id"], mine}
        started = admin.call("audit.list", action="jobs.start", user="alice")["records"]
        assert [(r["user"], r["target"], r["ok"]) for r in started] == [("alice", "system.probe", False),
                                                                  ("alice", job["id"], True)]
        refused = admin.call("audit.list", user="carol", ok=False)["records"]
        assert [r["action"] for r in refused] == ["jobs.stop"]
        assert admin.call("audit.list", action="users.add")["records"][0]["user"] == "local"
        from engine.api.lineage_report import to_markdown

        assert "- Launched by: alice (project vision)" in to_markdown(admin.call("jobs.lineage", id=job["id"]))


def test_wrong_revoked_and_expired_tokens_are_refused_and_revoking_closes_connections(engine_proc):
    with engine_proc.client("admin") as admin:
        dave = admin.call("users.add", name="dave", role="operator")["token"]
        erin = admin.call("users.add", name="erin", role="viewer", expires_days=1e-5)["token"]  # < 1 s
        with pytest.raises(RpcError) as err:
            _as(engine_proc, "emb_" + "x" * 43)
        assert err.value.code == UNAUTHORIZED and err.value.message == "Wrong token"
        time.sleep(1.2)
        with pytest.raises(RpcError, match="The token of erin expired"):
            _as(engine_proc, erin)
        d = _as(engine_proc, dave, "dave")
        assert d.call("users.me")["name"] == "dave"
        admin.call("users.revoke", name="dave")
        with pytest.raises((ConnectionError, OSError, TimeoutError)):
            wait_for(lambda: d.call("ping") and False, timeout=5, interval=0.1, what="the revoked connection to close")
        d.close()
        with pytest.raises(RpcError, match="The token of dave was revoked"):
            _as(engine_proc, dave)
        fresh = admin.call("users.update", name="dave", new_token=True, role="viewer")
        assert fresh["user"]["role"] == "viewer" and fresh["user"]["revoked_at"] is None
        with _as(engine_proc, fresh["token"]) as d2:
            assert d2.call("users.me")["role"] == "viewer"
        listed = admin.call("users.list")["users"]
        assert all("token" not in k for u in listed for k in u)  # only hashes are kept, and never shown
        with pytest.raises(RpcError) as err:
            admin.call("users.add", name="local", role=ADMIN)
        assert err.value.code == INVALID_PARAMS


def test_docs_security_holds_the_current_permissions_table():
    import importlib.util

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("permissions_table", ROOT / "scripts" / "permissions_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert module.table() in doc, "run python scripts/permissions_table.py and paste it into docs/security.md"


def test_projects_keep_their_data_folders_hosts_and_policy(engine_proc, tmp_path):
    """A project's data folder and host serve only its jobs; a non-member cannot look at its files; the data
    policy can name a project."""
    rows = "text,label\n" + "".join(f"ticket number {i},{'a' if i % 2 else 'b'}\n" for i in range(40))
    files = {}
    for project in ("vision", "nlp"):
        (tmp_path / project).mkdir()
        files[project] = tmp_path / project / "tickets.csv"
        files[project].write_text(rows)
    with engine_proc.client("admin") as admin:
        admin.call("hosts.add", host={"name": "gpu1", "address": "127.0.0.1"})
        admin.call("hosts.add", host={"name": "shared", "address": "127.0.0.1"})
        # The CLI an admin uses on the engine's machine; the same request as the Users card's Save project.
        cli = [sys.executable, "-m", "engine.cli", "projects"]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        done = subprocess.run([*cli, "set", "vision", "--data-folder", str(tmp_path / "vision"), "--host", "gpu1"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"vision: members -\n  data folders: {tmp_path / 'vision'}\n  hosts: gpu1" in done.stdout
        admin.call("projects.set", name="nlp", data_folders=[str(tmp_path / "nlp")])
        with pytest.raises(RpcError) as err:
            admin.call("projects.set", name="nlp", hosts=["no-such-host"])
        assert err.value.code == NOT_FOUND
        alice = admin.call("users.add", name="alice", role="operator", projects=["vision"])["token"]
        bob = admin.call("users.add", name="bob", role="operator", projects=["nlp"])["token"]
        assert {h["name"] for h in admin.call("hosts.list")["hosts"]} == {"gpu1", "shared"}
        assert [p["name"] for p in admin.call("projects.list")["projects"]] == ["default", "nlp", "vision"]
    finetune = {"task": "text_classification", "max_steps": 1, "device": "cpu"}
    with _as(engine_proc, alice, "gui-a") as a, _as(engine_proc, bob, "gui-b") as b, \
            engine_proc.client("admin") as admin_client:
        (mine,) = b.call("projects.list")["projects"]
        assert mine == {"name": "nlp", "data_folders": [str(tmp_path / "nlp")], "hosts": [], "endpoints": [],
                        "members": ["bob"]}
        assert {h["name"] for h in b.call("hosts.list")["hosts"]} == {"shared"}
        assert {h["name"] for h in a.call("hosts.list")["hosts"]} == {"gpu1", "shared"}

        refusals = [
            # A member of another project may not name the file at all (engine/daemon/resource_check.py) ...
            (b, "jobs.start", {"kind": "pii.scan", "spec": {"path": str(files["vision"])}}, "bob may not read"),
            (b, "jobs.start", {"kind": "train.finetune", "spec": {**finetune, "data": {"path": str(files["vision"])}}},
             "bob may not read"),
            (a, "jobs.start", {"kind": "train.finetune", "spec": {**finetune, "data": {"path": str(files["nlp"])}}},
             "alice may not read"),
            # ... and an admin's job of one project may not read another's data.
            (admin_client, "jobs.start", {"kind": "train.finetune", "project": "nlp",
                                          "spec": {**finetune, "data": {"path": str(files["vision"])}}},
             "data folder of project 'vision'; this job belongs to project 'nlp'"),
            # a host given to another project is not confirmed to exist to a non-member (hosts.list hides it)
            (b, "jobs.start", {"kind": "serve.model", "spec": {"model": {"builtin": "smollm2-135m-instruct"},
                                                               "host": "gpu1"}}, "No host 'gpu1'"),
            (admin_client, "jobs.start", {"kind": "serve.model", "project": "nlp",
                                          "spec": {"model": {"builtin": "smollm2-135m-instruct"}, "host": "gpu1"}},
             "Host 'gpu1' belongs to project(s) vision"),
            (b, "data.inspect", {"spec": {**finetune, "data": {"path": str(files["vision"])}}}, "bob may not read"),
            (b, "data.preview", {"spec": {**finetune, "data": {"path": str(files["vision"])}}}, "bob may not read"),
        ]
        for client, method, params, words in refusals:
            with pytest.raises(RpcError) as err:
                client.call(method, **params)
            code = NOT_FOUND if words.startswith("No host") else FORBIDDEN
            assert err.value.code == code and words in err.value.message, (method, err.value.message)
        # A member looks at their own project's file.
        seen = a.call("data.inspect", spec={**finetune, "data": {"path": str(files["vision"])}})
        assert seen["n_train"] + seen["n_val"] == 40

        with engine_proc.client("admin") as admin:
            assert admin.call("pii.set_policy", project="nlp", max_findings=0)["rules"] == \
                [{"project": "nlp", "max_findings": 0}]
        with pytest.raises(RpcError) as err:
            b.call("jobs.start", kind="train.finetune", spec={**finetune, "data": {"path": str(files["nlp"])}})
        assert err.value.code == protocol.POLICY_REFUSED and "data policy for project nlp" in err.value.message
        # The policy of nlp is not vision's: alice's fine-tune on her own data starts.
        job = a.call("jobs.start", kind="train.finetune", spec={**finetune, "data": {"path": str(files["vision"])}})
        assert job["project"] == "vision"
        a.call("jobs.cancel", id=job["id"])
