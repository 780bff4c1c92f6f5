"""Soak: 20 short real jobs queued at once, two clients subscribed, nothing lost or leaked.

The same function as `benchmarks/soak_bench.py`, at the issue's size.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _soak_module():
    spec = importlib.util.spec_from_file_location("soak_bench", ROOT / "benchmarks" / "soak_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("soak_bench", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_twenty_jobs_at_once_end_final_with_flat_memory_and_nothing_leaked(tmp_path, fault_report):
    soak = _soak_module()
    r = soak.soak(tmp_path / "home", n_jobs=20, samples=10, finetunes=1, timeout=300)
    assert soak.report(r)  # the same figures the benchmark prints
    assert r["lost"] == 0
    assert sum(r["states"].values()) == 20
    assert r["states"].get("cancelled") == 1 and r["states"].get("stopped", 0) + r["states"].get("succeeded", 0) == 19
    assert not r["unexpected_failures"], r["unexpected_failures"]
    # Both watchers saw every job's final state, as stored, and every sample event the store holds.
    assert r["subscribers_agree"]
    assert r["subscriber_samples"] == [r["stored_samples"]] * 2 and r["stored_samples"] >= 17 * 10
    assert r["leaked_processes"] == []
    assert r["engine_children_end"] == 0
    assert r["fds_end"] <= r["fds_start"]
    assert r["rss_growth"] < soak.RSS_GROWTH_TARGET, soak.report(r)
    mb = 1 << 20
    fault_report("soak: 20 jobs, 2 subscribers", "load (20 queued at once, 1 stopped, 1 cancelled)",
                 f"all final {r['states']}; RSS {r['rss_start'] / mb:.0f}->{r['rss_end'] / mb:.0f} MiB; "
                 f"fds {r['fds_start']}->{r['fds_end']}; leaked 0",
                 f"{r['stored_samples']} sample events", f"{r['subscriber_samples']} seen")
