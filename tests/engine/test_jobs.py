"""Job lifecycle with real detached processes: run, stop, cancel, crash, re-discovery."""

import json
import os
import signal
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES
from tests.conftest import wait_for


def wait_state(client, job_id, states, timeout=30.0):
    return wait_for(lambda: (j := client.call("jobs.get", id=job_id))["state"] in states and j,
                    timeout=timeout, what=f"job {job_id} to reach {states}")


def test_probe_job_reports_real_facts(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={})
        assert job["state"] in ("queued", "running")
        done = wait_state(c, job["id"], FINAL_STATES)
        assert done["state"] == "succeeded", done
        facts = done["result"]
        assert facts["cpu"]["logical_cores"] == os.cpu_count()
        assert facts["memory"]["total_bytes"] > 1 << 30
        assert facts["python"]["version"].count(".") == 2
        assert "torch" in facts["packages"] and "gpu" in facts
        run_dir = Path(done["run_dir"])
        assert (run_dir / "spec.yaml").read_text().startswith("kind: system.probe")
        lines = (run_dir / "events.jsonl").read_text().splitlines()
        assert [json.loads(x)["kind"] for x in lines] == ["status", "result", "status"]
        stored = c.call("events.query", topics=[f"run/{job['id']}/*"])["events"]
        assert [e["data"]["kind"] for e in stored] == ["status", "result", "status"]
        audit = c.call("audit.list")["records"]
        assert audit[0]["action"] == "jobs.start" and audit[0]["target"] == job["id"] and audit[0]["ok"]


def test_live_events_follow_a_sampling_job(engine_proc):
    with engine_proc.client() as c:
        c.subscribe(["run/*/sample", "jobs"])
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 5, "interval_s": 0.05})
        samples, states = [], []
        for ev in c.events(timeout=20):
            if ev["topic"] == "jobs" and ev["data"]["id"] == job["id"]:
                states.append(ev["data"]["state"])
                if ev["data"]["state"] in FINAL_STATES:
                    break
            elif ev["topic"] == f"run/{job['id']}/sample":
                samples.append(ev["data"]["step"])
        assert samples == [0, 1, 2, 3, 4]
        assert states[-1] == "succeeded" and "running" in states


def test_graceful_stop_ends_stopped_with_final_status_from_the_job(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 10_000, "interval_s": 0.05})
        wait_for(lambda: c.call("events.query", topics=[f"run/{job['id']}/sample"])["events"], what="a sample")
        assert c.call("jobs.stop", id=job["id"])["state"] == "stopping"
        done = wait_state(c, job["id"], FINAL_STATES)
        assert done["state"] == "stopped"
        assert done["exit_code"] == 0  # the job handled SIGTERM and exited cleanly
        last = json.loads((Path(done["run_dir"]) / "events.jsonl").read_text().splitlines()[-1])
        assert last == {**last, "kind": "status", "state": "stopped"}


def test_cancel_kills_the_process_group(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 10_000, "interval_s": 0.05})
        running = wait_state(c, job["id"], ("running",))
        c.call("jobs.cancel", id=job["id"])
        done = wait_state(c, job["id"], FINAL_STATES)
        assert done["state"] == "cancelled"
        assert done["exit_code"] == -signal.SIGKILL
        with pytest.raises(ProcessLookupError):
            os.kill(running["pid"], 0)


def test_job_killed_from_outside_fails_with_reason(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 10_000, "interval_s": 0.05})
        running = wait_state(c, job["id"], ("running",))
        os.kill(running["pid"], signal.SIGKILL)
        done = wait_state(c, job["id"], FINAL_STATES)
        assert done["state"] == "failed"
        assert done["error"]["message"] == "The job process was killed by signal SIGKILL without reporting a result."
        assert "stdout.log" in done["error"]["hint"]


def test_queue_respects_concurrency_and_cancel_of_queued_job(engine_proc):
    spec = {"samples": 10_000, "interval_s": 0.05}
    with engine_proc.client() as c:
        jobs = [c.call("jobs.start", kind="system.probe", spec=spec) for _ in range(3)]
        assert [j["state"] for j in jobs] == ["running", "running", "queued"]
        assert c.call("jobs.cancel", id=jobs[2]["id"])["state"] == "cancelled"
        c.call("jobs.cancel", id=jobs[0]["id"])
        fourth = c.call("jobs.start", kind="system.probe", spec={})
        assert wait_state(c, fourth["id"], FINAL_STATES)["state"] == "succeeded"
        assert c.call("jobs.get", id=jobs[2]["id"])["pid"] is None  # never started
        c.call("jobs.cancel", id=jobs[1]["id"])


def test_job_outlives_engine_sigkill_and_is_reattached_without_duplicates(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 40, "interval_s": 0.05})
        wait_for(lambda: c.call("events.query", topics=[f"run/{job['id']}/sample"])["events"], what="a sample")
    engine_proc.kill()
    engine_proc.restart()
    with engine_proc.client() as c:
        done = wait_state(c, job["id"], FINAL_STATES)
        assert done["state"] == "succeeded"
        events = c.call("events.query", topics=[f"run/{job['id']}/*"], limit=10_000)["events"]
    lines = (Path(done["run_dir"]) / "events.jsonl").read_text().splitlines()
    assert len(events) == len(lines) == 43  # running + result + 40 samples + succeeded
    assert [e["data"].get("step") for e in events if e["data"]["kind"] == "sample"] == list(range(40))


def test_job_that_finishes_while_engine_is_down_is_settled_from_its_events(engine_proc):
    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={"samples": 4, "interval_s": 0.2})
        running = wait_state(c, job["id"], ("running",))
    engine_proc.kill()
    wait_for(lambda: not Path(f"/proc/{running['pid']}").exists()
             or "Z" in Path(f"/proc/{running['pid']}/stat").read_text().split()[2], what="job to end")
    engine_proc.restart()
    with engine_proc.client() as c:
        done = wait_state(c, job["id"], FINAL_STATES)
        assert done["state"] == "succeeded"
        assert len(c.call("events.query", topics=[f"run/{job['id']}/*"])["events"]) == 7


def test_logs_and_unknown_job(engine_proc):
    from engine.api.protocol import NOT_FOUND, RpcError

    with engine_proc.client() as c:
        job = c.call("jobs.start", kind="system.probe", spec={})
        wait_state(c, job["id"], FINAL_STATES)
        assert isinstance(c.call("jobs.logs", id=job["id"])["lines"], list)
        with pytest.raises(RpcError) as exc:
            c.call("jobs.get", id="r-nope")
        assert exc.value.code == NOT_FOUND and "jobs.list" in exc.value.hint


def test_a_job_that_fails_at_once_keeps_its_own_error(engine_proc):
    # A job that reports its failure and exits between two polls: the error it wrote must
    # reach the final record, not be overwritten by the store's not-yet-flushed copy.
    with engine_proc.client() as c:
        probe = wait_state(c, c.call("jobs.start", kind="system.probe", spec={})["id"], FINAL_STATES)
        ids = [c.call("jobs.start", kind="compress.lora_merge", spec={"source_run": probe["id"]})["id"]
               for _ in range(4)]
        for job_id in ids:
            done = wait_state(c, job_id, FINAL_STATES, timeout=120)
            assert done["state"] == "failed", done
            assert done["error"] and "resume or finish the run first" in done["error"]["hint"], done
