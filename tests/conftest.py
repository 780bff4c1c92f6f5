"""Shared fixtures: a private EMBER_HOME per test and a real engine process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from engine.api import paths as paths_mod
from engine.cli.client import BlockingClient, EngineNotRunning
from tests.timing import VARIABLE, scaled, slowness

ROOT = Path(__file__).resolve().parent.parent

# What scikit-learn and DeepSpeed set in os.environ when a test imports them in this process, set from the
# start: every engine a test starts then has the same load-time environment, so its jobs share one warm fork
# server (engine/launch/forkserver.py) instead of starting one more after each such import.
for _name, _value in (("KMP_DUPLICATE_LIB_OK", "True"), ("KMP_INIT_AT_FORK", "FALSE"),
                      ("PYTORCH_NVML_BASED_CUDA_CHECK", "1")):
    os.environ.setdefault(_name, _value)


def pytest_configure(config):
    slowness()  # measured here, before pytest-xdist starts the workers that inherit it (tests/timing.py)


def pytest_report_header(config):
    return f"limits scaled by {slowness():.2f} ({VARIABLE}; tests/timing.py)"


def pytest_terminal_summary(terminalreporter):
    """The fault-injection table (tests/faults): per scenario, the fault, what survived, rows expected vs stored."""
    rows = [value for key in ("passed", "failed") for rep in terminalreporter.stats.get(key, [])
            if getattr(rep, "when", "") == "call"
            for name, value in getattr(rep, "user_properties", []) if name == "fault_report"]
    if not rows:
        return
    tr = terminalreporter
    tr.section("fault injection: what survived")
    for scenario, fault, survived, expected, stored in rows:
        tr.write_line(f"{scenario}: {fault}")
        tr.write_line(f"    survived: {survived}")
        tr.write_line(f"    rows expected: {expected} | rows stored: {stored}")


# The longest files first, by their measured total (a fresh-clone run's --junitxml): with `-n 2 --dist loadfile
# --no-loadscope-reorder` (scripts/test.sh) each worker takes the next file when it is free, so the long ones
# must not come last or one worker idles while the other finishes them. The language-model files that both
# need SmolLM2's folder are not side by side at the start (one would wait for the other's preparation).
LONGEST_FIRST = (
    "tests/engine/test_llm_loop.py", "tests/engine/test_strategies.py", "tests/engine/test_compress_jobs.py",
    "tests/remote/test_multinode.py", "tests/engine/test_finetune.py", "tests/engine/test_parallel.py",
    "tests/engine/test_serve.py", "tests/faults/test_worker_kill.py", "tests/engine/test_export_llm.py",
    "tests/remote/test_jetson_deploy.py", "tests/engine/test_export_jobs.py", "tests/app/test_first_use_llm.py",
    "tests/app/test_playground_page.py", "tests/app/test_end_to_end.py", "tests/engine/test_sweeps.py",
    "tests/remote/test_slurm.py", "tests/app/test_newcomer.py", "tests/engine/test_export_formats.py",
    "tests/engine/test_pii.py", "tests/engine/test_playground.py", "tests/app/test_hosts_page.py",
    "tests/faults/test_soak.py", "tests/engine/test_evaluate_job.py", "tests/app/test_wizard.py",
    "tests/engine/test_distill_qat.py", "tests/engine/test_quantize.py", "tests/engine/test_speed.py",
    "tests/app/test_runs_page.py", "tests/engine/tasks/test_causal_lm.py", "tests/engine/test_estimate.py",
    "tests/app/test_welcome.py", "tests/engine/test_lora_merge.py", "tests/app/test_compare.py",
)


def _file_rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """The longest files first (see LONGEST_FIRST); `gpu` tests run only where CUDA is usable
    (run them with `pytest -m gpu` on a GPU machine)."""
    items.sort(key=_file_rank)  # stable: the order within a file, and among the rest, is kept
    limit = float(config.getini("timeout") or 0)
    for item in items:  # pytest-timeout's limit, the file's or the test's own, scaled (tests/timing.py)
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0] if marker and marker.args else
                        (marker.kwargs.get("timeout", limit) if marker else limit))
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(scaled(seconds)), append=False)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _no_user_data_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A test that runs engine code without ember_home (a Trainer in-process, a CPU peak it remembers)
    writes into this session's folder, never into the data folder of the person running the tests."""
    old = os.environ.get("EMBER_HOME")
    os.environ["EMBER_HOME"] = str(tmp_path_factory.mktemp("session-home"))
    # The built-in models are written once for the whole run, every xdist worker and engine included:
    # converting SmolLM2 from its GGUF file takes about 25 s.
    from tests.fixtures.trained_runs import cache_root

    os.environ.setdefault("EMBER_MODELS_DIR", str(cache_root(tmp_path_factory).parent / "builtin-models"))
    yield
    if old is None:
        os.environ.pop("EMBER_HOME", None)
    else:
        os.environ["EMBER_HOME"] = old


@pytest.fixture
def ember_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> paths_mod.Paths:
    home = tmp_path / "home"
    monkeypatch.setenv("EMBER_HOME", str(home))
    monkeypatch.setenv("EMBER_SSH_KNOWN_HOSTS", "")  # only the keys a test trusts, never this machine user's
    monkeypatch.delenv("EMBER_RUNTIME_DIR", raising=False)
    return paths_mod.resolve()


@dataclass
class RunningEngine:
    paths: paths_mod.Paths
    proc: subprocess.Popen

    def client(self, name: str = "test", timeout: float = 30.0) -> BlockingClient:
        return BlockingClient.connect(self.paths, client=name, timeout=scaled(timeout))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def restart(self) -> None:
        self.proc = start_engine_process(self.paths)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_engine_process(p: paths_mod.Paths, *extra: str, timeout: float = 20.0) -> subprocess.Popen:
    if os.environ.get("EMBER_TEST_ENGINE") == "tls" and "--listen" not in extra:
        extra = (*extra, "--listen", "127.0.0.1:0")  # a GUI test's window connects to it over TLS
    p.home.mkdir(parents=True, exist_ok=True)
    log = open(p.home / "engine.log", "ab")  # noqa: SIM115 - kept open for the process
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", *extra], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode}: {(p.home / 'engine.log').read_text()}")
        with contextlib.suppress(EngineNotRunning, ConnectionError, FileNotFoundError):
            BlockingClient.connect(p, client="probe", timeout=5).close()
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("engine did not come up")


def alive(pid: int | None) -> bool:
    """True while ``pid`` is a running process (a zombie counts as ended)."""
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_job_groups(home: Path) -> None:
    """Jobs run detached; make sure none outlives its test."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "--run-dir" in cmd and str(home) in cmd:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.info["pid"], signal.SIGKILL)


@pytest.fixture
def engine_proc(ember_home: paths_mod.Paths) -> Iterator[RunningEngine]:
    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    yield eng
    eng.stop()
    kill_job_groups(ember_home.home)


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory: pytest.TempPathFactory):
    """Finished fine-tunes (text, digits, lora: tests/fixtures/trained_runs.py), trained once per session."""
    from tests.fixtures.trained_runs import TrainedRuns, cache_root

    return TrainedRuns(cache_root(tmp_path_factory))


@pytest.fixture
def engine_with_runs(ember_home: paths_mod.Paths, trained_runs):
    """``start(*kinds)`` -> (engine, {kind: run id}): this test's engine, started with private copies of the
    shared fine-tunes as its finished runs (the sources a compression, export or merge starts from)."""
    engines: list[RunningEngine] = []

    def start(*kinds: str) -> tuple[RunningEngine, dict[str, str]]:
        assert not engines, "one engine per test"
        ids = trained_runs.seed(ember_home.home, *kinds)
        engines.append(RunningEngine(ember_home, start_engine_process(ember_home)))
        return engines[0], ids

    yield start
    for eng in engines:
        eng.stop()
    kill_job_groups(ember_home.home)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """``predicate()``'s first true value, polled until ``timeout`` seconds (scaled: tests/timing.py)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """A real Slurm (slurmctld, slurmd, munged) on 127.0.0.1 with one 2-CPU node (see tests/slurm.py).
    Skipped where Slurm is not installed, except under EMBER_REQUIRE_SLURM=1 (.ci/run), where that fails."""
    from tests.slurm import Slurm, missing

    absent = missing()
    if absent and os.environ.get("EMBER_REQUIRE_SLURM") != "1":
        pytest.skip(f"Slurm is not installed ({', '.join(absent)}): apt-get install slurm-wlm munge")
    server = Slurm(tmp_path_factory.mktemp("slurm")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    """A real OpenSSH server on 127.0.0.1 that accepts the test's client key (see tests/sshd.py)."""
    from tests.sshd import make_sshd

    server = make_sshd(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()
