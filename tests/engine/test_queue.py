"""The job queue: the scheduler's rules on plain values, then a real engine's order, priorities and restart."""

from __future__ import annotations

import re
import time

import pytest

from engine.api.protocol import INVALID_PARAMS, INVALID_STATE, RpcError
from engine.cli import main as cli
from engine.daemon.scheduler import Capacity, Job, Settings, job_need, plan, threads_per_process
from tests.conftest import RunningEngine, kill_job_groups, start_engine_process, wait_for
from tests.engine.test_finetune import events_of

CPU2 = {"local": Capacity(cores=2, gpus=0)}
GPU2 = {"local": Capacity(cores=16, gpus=2)}


def job(job_id: str, cores: int = 1, gpus: int = 0, held: list[int] | None = None) -> Job:
    return Job(job_id, cores={"local": cores} if cores else {}, gpus=gpus, held={"local": held} if held else {})


# -- the scheduler, without processes ------------------------------------------------------------

def test_concurrency_limit_is_the_reason_when_slots_are_full():
    running = [job(f"r{i}", cores=0) for i in range(3)]
    p = plan(running, [job("q1", cores=0)], {"local": Capacity(64, 0)}, Settings(max_concurrent=3))
    assert p.start == []
    assert p.reasons == {"q1": "3 jobs already running (limit 3)"}


def test_cores_are_counted_and_the_reason_says_how_many_are_free():
    p = plan([job("rA", cores=1)], [job("q2", cores=2), job("q1", cores=1)], CPU2, Settings(max_concurrent=4))
    # q2 waits for two cores with one free, and holds that one so q1 cannot overtake it.
    assert p.reasons["q2"] == "waiting for 2 CPU cores (1 free)"
    assert p.reasons["q1"] == "waiting for 1 CPU core (0 free, 1 held for jobs ahead)"
    assert p.start == []
    # Once rA ends, q2 starts first.
    p = plan([], [job("q2", cores=2), job("q1", cores=1)], CPU2, Settings(max_concurrent=4))
    assert [s[0] for s in p.start] == ["q2"]


def test_a_user_core_limit_replaces_the_machine_count():
    p = plan([], [job("a"), job("b")], CPU2, Settings(max_concurrent=4), cpu_limit={"local": 1})
    assert [s[0] for s in p.start] == ["a"]
    assert p.reasons["b"] == "waiting for 1 CPU core (0 free)"


def test_two_trainings_never_share_a_gpu_unless_allowed():
    running = [job("rA", gpus=1, held=[0])]
    p = plan(running, [job("q1", gpus=1), job("q2", gpus=1)], GPU2, Settings(max_concurrent=8))
    assert p.start == [("q1", {"local": [1]})]
    assert p.reasons["q2"] == "waiting for 1 GPU (0 free): GPU 0 is used by rA; GPU 1 is used by q1"
    shared = plan(running, [job("q1", gpus=1), job("q2", gpus=1)], GPU2,
                  Settings(max_concurrent=8, allow_gpu_sharing=True))
    assert shared.start == [("q1", {"local": [1]}), ("q2", {"local": [0]})]  # least used first


def test_a_job_that_can_never_fit_waits_with_the_reason_and_does_not_block():
    p = plan([], [job("big", gpus=8), job("small")], CPU2, Settings(max_concurrent=1))
    assert p.reasons["big"] == ("needs 8 GPUs but this machine has 0; it cannot start until the spec or "
                                "the machine changes")
    assert p.never_fits == {"big"}
    assert [s[0] for s in p.start] == ["small"]  # and big holds no slot


def test_needs_come_from_the_spec():
    finetune = {"device": "cpu", "distributed": {"strategy": "ddp", "nproc": 2}}
    assert job_need("train.finetune", finetune, CPU2) == ({"local": 2}, {})
    assert job_need("train.finetune", {"device": "auto"}, GPU2) == ({"local": 1}, {"local": 1})
    assert job_need("train.finetune", {"device": "auto"}, CPU2) == ({"local": 1}, {})
    assert job_need("train.finetune", {"device": "cuda"}, CPU2) == ({"local": 1}, {"local": 1})  # never fits
    multi = {"device": "cuda", "distributed": {"strategy": "ddp", "nodes": [{"host": "gpu1", "nproc": 4},
                                                                           {"host": "local", "nproc": 2}]}}
    assert job_need("train.finetune", multi, GPU2) == ({"gpu1": 4, "local": 2}, {"gpu1": 4, "local": 2})
    assert job_need("system.probe", {}, GPU2) == ({}, {})
    assert job_need("compress.qat", {}, GPU2) == ({"local": 1}, {"local": 1})
    assert job_need("compress.quantize", {}, GPU2) == ({"local": 1}, {})


def test_multi_node_runs_count_on_their_hosts_only():
    caps = {"local": Capacity(2, 0), "gpu1": Capacity(8, 4)}
    remote = Job("m", cores={"gpu1": 4}, gpus={"gpu1": 4})
    p = plan([Job("rA", cores={"gpu1": 1}, gpus={"gpu1": 1}, held={"gpu1": [0]})],
             [remote, job("local1"), job("local2")], caps, Settings(max_concurrent=8))
    assert p.reasons["m"].startswith("waiting for 4 GPUs on gpu1 (3 free")
    assert [s[0] for s in p.start] == ["local1", "local2"]  # this machine's cores are not touched by m
    unknown = plan([], [Job("m", cores={"far": 64}, gpus={"far": 64})], {"local": Capacity(2, 0)},
                   Settings(max_concurrent=8))
    assert unknown.start == [("m", {})]  # a host never probed limits nothing


# -- a real engine ----------------------------------------------------------------------------------

LONG_PROBE = {"samples": 10_000, "interval_s": 0.2}
TINY_CPU = {"task": "image_classification", "method": {"kind": "full"}, "batch_size": 8, "max_steps": 200,
            "eval_every": 200, "checkpoint_every": 200, "device": "cpu"}


def order(c) -> list[str]:
    return [j["id"] for j in c.call("queue.get")["jobs"]]


def test_order_priority_and_settings_survive_an_engine_restart(engine_proc, capsys):
    with engine_proc.client() as c:
        c.subscribe(["queue"])
        conf = c.call("queue.configure", max_concurrent=1)
        assert conf["settings"]["max_concurrent"] == 1
        a = c.call("jobs.start", kind="system.probe", spec=LONG_PROBE, name="a")
        b, d, e = (c.call("jobs.start", kind="system.probe", spec=LONG_PROBE, name=n)["id"] for n in "bde")
        assert a["state"] == "running"
        assert order(c) == [b, d, e]
        reason = c.call("queue.get")["jobs"][0]["reason"]
        assert reason == "1 job already running (limit 1)"
        c.call("jobs.prioritize", id=e, priority=5)
        assert order(c) == [e, b, d]
        c.call("queue.move", id=d, to="top")  # it takes priority 5 to stay first
        assert order(c) == [d, e, b]
        c.call("queue.move", id=b, to="up")
        assert order(c) == [d, b, e]
        moved = {j["id"]: j["priority"] for j in c.call("queue.get")["jobs"]}
        assert moved == {d: 5, b: 5, e: 5}
        c.call("queue.move", id=d, to="bottom")
        assert order(c) == [b, e, d]
        with pytest.raises(RpcError) as err:
            c.call("queue.move", id=a["id"], to="up")
        assert err.value.code == INVALID_STATE
        with pytest.raises(RpcError) as err:
            c.call("queue.move", id=b, to="sideways")
        assert err.value.code == INVALID_PARAMS
        # Every change was published on `queue`, and audited.
        orders = [[j["id"] for j in ev["data"]["jobs"]] for ev in c.events(timeout=1) if ev["topic"] == "queue"]
        assert [e, b, d] in orders and [d, e, b] in orders and orders[-1] == [b, e, d]
        actions = [r["action"] for r in c.call("audit.list", limit=20)["records"]]
        assert {"queue.configure", "jobs.prioritize", "queue.move"} <= set(actions)
    engine_proc.kill()
    engine_proc.restart()
    with engine_proc.client() as c:
        assert order(c) == [b, e, d]
        q = c.call("queue.get")
        assert q["settings"]["max_concurrent"] == 1
        assert [r["id"] for r in q["running"]] == [a["id"]]  # re-attached, still holding its slot
        # The same from the command line: `ember queue priority`, then the listing in run order.
        capsys.readouterr()
        assert cli.main(["queue", "priority", d, "9"]) == 0
        assert cli.main(["queue"]) == 0
        out = capsys.readouterr().out
        assert "limits: 1 jobs at once" in out
        listed = re.findall(r"^\s+\d+\. (\S+)", out.split("limits:")[-1], re.MULTILINE)
        assert listed == [d, b, e], out
        assert order(c) == [d, b, e]
        c.call("jobs.cancel", id=a["id"])
        wait_for(lambda: c.call("jobs.get", id=d)["state"] == "running", what="d (priority 9) to start next")
        assert c.call("jobs.get", id=b)["state"] == "queued" and c.call("jobs.get", id=e)["state"] == "queued"
        for job_id in (b, e, d):
            c.call("jobs.cancel", id=job_id)


def test_thread_pools_are_the_jobs_share_of_the_cores():
    assert threads_per_process(2, 1, 1) == 2  # alone: every core
    assert threads_per_process(2, 1, 2) == 1  # two one-core jobs: half each
    assert threads_per_process(8, 1, 3) == 2
    assert threads_per_process(8, 2, 2, nproc=2) == 4  # a two-process run alone: half each process
    assert threads_per_process(2, 2, 2, nproc=2) == 1
    assert threads_per_process(1, 1, 4) == 1  # never none
    assert threads_per_process(4, 0, 0) == 4


def test_a_job_gets_its_share_of_the_cores_unless_the_user_set_omp_num_threads(ember_home, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    try:
        with eng.client() as c:
            c.call("queue.configure", max_concurrent=2, cpu_cores=4)
            first = c.call("jobs.start", kind="train.finetune", spec=TINY_CPU, name="first")
            second = c.call("jobs.start", kind="train.finetune", spec=TINY_CPU, name="second")

            def threads(job_id: str) -> str | None:
                """The cap the job got, as it reports it (a job forked from the fork server shows the server's
                environment in /proc, not its own)."""
                info = wait_for(lambda: events_of(c, job_id, "run_info"), timeout=120, what="the job's run_info")
                return info[0]["threads"]["OMP_NUM_THREADS"]

            # Started one after the other: the first alone (every core it may use), the second beside it.
            assert (threads(first["id"]), threads(second["id"])) == ("4", "2")
            for j in (first, second):
                c.call("jobs.cancel", id=j["id"])
    finally:
        eng.stop()
        kill_job_groups(ember_home.home)


def test_two_cpu_heavy_jobs_do_not_start_together_when_cores_do_not_allow(engine_proc):
    with engine_proc.client() as c:
        c.call("queue.configure", max_concurrent=2, cpu_cores=1)
        never = c.call("jobs.start", kind="train.finetune", spec={**TINY_CPU, "device": "cuda"}, name="gpu only")
        first = c.call("jobs.start", kind="train.finetune", spec=TINY_CPU, name="first")
        second = c.call("jobs.start", kind="train.finetune", spec=TINY_CPU, name="second")
        assert first["state"] == "running" and second["state"] == "queued"
        reasons = {j["id"]: j["reason"] for j in c.call("queue.get")["jobs"]}
        assert reasons[second["id"]] == "waiting for 1 CPU core (0 free)"
        assert "has 0" in reasons[never["id"]]  # never fits here, and did not stop `first`
        time.sleep(1.0)
        assert c.call("jobs.get", id=second["id"])["state"] == "queued"
        c.call("jobs.cancel", id=first["id"])
        wait_for(lambda: c.call("jobs.get", id=second["id"])["state"] == "running", what="second to start")
        ended = wait_for(lambda: (j := c.call("jobs.get", id=first["id"]))["ended_at"] and j, what="first ended")
        assert c.call("jobs.get", id=second["id"])["started_at"] >= ended["ended_at"]
        c.call("jobs.cancel", id=second["id"])
        c.call("jobs.cancel", id=never["id"])
        c.call("queue.configure", cpu_cores=0)
        assert c.call("queue.get")["settings"]["cpu_cores"] is None
