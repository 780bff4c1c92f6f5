"""One click to Jetson: copy a deploy bundle over SSH, build and benchmark it there, bring the figures back.

The export job is its own process, so it opens its own SSH connection
(``engine.launch.ssh.connect``) with the host key the user already trusted in
Ember's ``known_hosts``. A host that logs in with a password is refused: the
password lives only in the engine's memory, never in a job.

Upload (``JetsonLink.upload``) is resumable and never leaves a half-updated
bundle that looks complete:

- the host's ``manifest.json`` is removed first, so an interrupted upload is
  never mistaken for a finished one;
- a file whose size and sha256 (computed on the host with its Python's hashlib)
  already match is skipped;
- each file is written under a temporary name and renamed into place, so a
  file at its real name is always whole;
- ``manifest.json`` goes last, only after every other file was checked on the
  host, itself checked before it is renamed into place.

``build_engine.sh`` and ``benchmark.sh`` run with ``bash`` in the bundle's
folder, with ``PATH`` extended by ``/usr/src/tensorrt/bin`` and the directory
of the host's Python (its venv's ``bin``), in that order after the existing
``PATH``; ``probe`` finds ``trtexec`` by that same lookup (``$TRTEXEC`` first)
and reads the TensorRT version from the banner it prints. Their output is
streamed line by line; a stop kills the script's whole process group on the
host.

Only stdlib and asyncssh (through engine.launch.ssh) are imported here; the
host needs only Python 3.8+ (the helper below is sent on stdin).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from engine.api.host_spec import HostSpec
from engine.export import device_ctl
from engine.export.jetson_bundle import sha256_file
from engine.launch import ssh
from engine.launch.nodes import NODE_CTL_SOURCE
from engine.launch.ssh import RemoteError, where
from engine.training.context import JobFailed

MANIFEST = "manifest.json"
BUILD_SCRIPT = "build_engine.sh"
LLM_BUILD_SCRIPT = "build_llama_cpp.sh"  # a language model's bundle (engine/export/llm_bundle.py)
BENCH_SCRIPT = "benchmark.sh"
TRT_BIN = "/usr/src/tensorrt/bin"  # where JetPack installs trtexec (not on PATH by default)
PART = ".ember-part"  # suffix of a file being uploaded; renamed to its real name once whole
BUILD_TIMEOUT_S = 3 * 3600  # a big model on a Nano can take an hour or more to build
BENCH_TIMEOUT_S = 1800
TAIL_LINES = 25  # output lines quoted in a failure message
PID_MARK = "ember-deploy-pid="

Progress = Callable[[int, int, str], None]  # (bytes sent, bytes to send, message)
OnEvent = Callable[..., None]  # ("upload", fraction, message) | ("build" | "benchmark", line)

# The device side of the upload and probe (stdlib only), sent on stdin like node_ctl.
HOST_HELPER = Path(device_ctl.__file__).read_text(encoding="utf-8")


class LinkLost(RemoteError):
    """The SSH connection dropped in the middle of something; running it again picks up from there."""


def tensorrt_version(banner: str | None) -> str | None:
    """'&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # ...' -> '10.3.0' (trt_support.parse_version reads it)."""
    from engine.export.trt_support import parse_version

    match = re.search(r"\[TensorRT (v\d+)\]", banner or "")
    return ".".join(str(p) for p in parse_version(match.group(1))) if match else None


def bundle_files(bundle_dir: Path) -> dict[str, tuple[int, str]]:
    """{relative posix path: (size, sha256)} of every file in the bundle, hashed from the files as they are now
    (not from the manifest: a bundle changed after it was written is sent as it is, and the device says so)."""
    if not (bundle_dir / MANIFEST).is_file():
        raise JobFailed(f"{bundle_dir} is not a complete Jetson bundle: it has no {MANIFEST}",
                        "Export the jetson format again; the manifest is written last, when the bundle is whole.")
    found = {}
    for path in sorted(bundle_dir.rglob("*")):
        if path.is_file() and not path.name.endswith(PART):
            found[path.relative_to(bundle_dir).as_posix()] = (path.stat().st_size, sha256_file(path))
    return found


class JetsonLink:
    """One SSH connection to a Jetson (or any host with trtexec), for the export job."""

    def __init__(self, host: HostSpec, known_hosts: Path):
        self.host = host
        self.known_hosts = Path(known_hosts)
        self.conn: Any = None
        self.sftp: Any = None
        self.path_extra: list[str] | None = None  # what probe found: [TRT_BIN, the host Python's dir]
        self.trtexec_path: str | None = None

    # ---- connection
    async def connect(self) -> None:
        if self.host.auth == "password":
            raise RemoteError(f"{where(self.host)} logs in with a password, which only the engine holds in memory: "
                              "use key or agent authentication for one-click deploy",
                              "Edit the host on the Hosts page: choose a key file or the SSH agent "
                              "(ssh-copy-id puts your public key on the Jetson).")
        import asyncssh

        self.conn = await ssh.connect(self.known_hosts, self.host)
        try:
            self.sftp = await self.conn.start_sftp_client()
        except (OSError, asyncssh.Error) as exc:
            self.close()
            raise RemoteError(f"{where(self.host)} has no SFTP service: {exc}",
                              "Enable the sftp subsystem in the host's sshd_config (it is on by default).") from None

    def close(self) -> None:
        if self.sftp is not None:
            with contextlib.suppress(Exception):
                self.sftp.exit()
        if self.conn is not None:
            self.conn.close()
        self.conn = self.sftp = None

    def _lost(self, what: str, exc: BaseException) -> LinkLost:
        return LinkLost(f"The connection to {where(self.host)} was lost while {what}: "
                        f"{str(exc) or type(exc).__name__}",
                        "Check the network and run it again; the files already on the host are kept.")

    async def _python(self, source: str, op: str, args: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
        """Run a stdlib script on the host's Python (source on stdin) and read its one JSON line."""
        try:
            rc, out, err = await ssh.run_python(self.conn, self.host, source, op, args, timeout)
        except RemoteError as exc:  # the link dropped or the host hung: running it again goes on from there
            raise LinkLost(str(exc), exc.hint) from None
        return ssh.python_reply(self.host, op, rc, out, err)

    # ---- facts
    async def probe(self, trtexec: bool = True) -> dict[str, Any]:
        """node_ctl's probe facts plus ``trtexec``: {path, tensorrt_version, banner} (path None when not found,
        or not looked for)."""
        facts = await self._python(NODE_CTL_SOURCE, "probe", {"workdir": self.host.workdir, "import_torch": False})
        found = await self._python(HOST_HELPER, "trtexec", {}, timeout=120) if trtexec else {}
        facts["trtexec"] = {"path": found.get("path"), "tensorrt_version": tensorrt_version(found.get("banner")),
                            "banner": found.get("banner"), "error": found.get("error")}
        self.use_facts(facts)
        return facts

    def use_facts(self, facts: dict[str, Any]) -> None:
        """Take the trtexec lookup from a probe (this link's or an earlier one's) for run_script."""
        self.path_extra = [TRT_BIN, _dirname(facts)]
        self.trtexec_path = (facts.get("trtexec") or {}).get("path")

    # ---- files
    async def read_text(self, remote_path: str) -> str:
        import asyncssh

        try:
            async with self.sftp.open(remote_path, "rb") as f:
                return (await f.read()).decode("utf-8", "replace")
        except asyncssh.SFTPNoSuchFile:
            raise RemoteError(f"{remote_path} does not exist on {where(self.host)}",
                              "Run the step that writes it first.") from None
        except (OSError, asyncssh.Error) as exc:
            raise self._lost(f"reading {remote_path}", exc) from None

    async def upload(self, bundle_dir: Path, remote_dir: str, progress: Progress | None = None,
                     should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Copy the bundle into remote_dir, resumably; returns {sent, skipped, bytes, files, dir} (dir: absolute).

        should_stop() is asked between files; a stop leaves the host without a manifest and adds stopped: True."""
        import asyncssh

        bundle_dir = Path(bundle_dir)
        local = await asyncio.to_thread(bundle_files, bundle_dir)
        sizes = {rel: size for rel, (size, _sha) in local.items() if rel != MANIFEST}
        there = await self._python(HOST_HELPER, "prepare", {"dir": remote_dir, "files": sizes})
        base = there["dir"]
        todo = [rel for rel in sizes if there["files"].get(rel) != [local[rel][0], local[rel][1]]]
        todo.append(MANIFEST)  # always: it was removed above, and goes last
        skipped = len(local) - len(todo)
        total = sum(local[rel][0] for rel in todo)
        done = 0
        report = progress or (lambda _done, _total, _message: None)
        report(0, total, f"{len(todo)} of {len(local)} files to send ({total / 1e6:.1f} MB)"
               + (f", {skipped} already there" if skipped else ""))
        try:
            for rel in todo:
                if should_stop():
                    return {"dir": base, "sent": todo.index(rel), "skipped": skipped, "bytes": done,
                            "files": len(local), "stopped": True}
                if rel == MANIFEST:
                    await self._verify(base, {r: local[r] for r in todo if r != MANIFEST}, "")
                await self._put(bundle_dir / rel, base, rel, lambda copied, d=done, r=rel: report(
                    d + copied, total, f"sending {r}"))
                if rel == MANIFEST:
                    await self._verify(base, {MANIFEST: local[MANIFEST]}, PART)
                await self._rename(f"{base}/{rel}{PART}", f"{base}/{rel}")
                done += local[rel][0]
                report(done, total, f"sent {rel}")
        except asyncssh.SFTPError as exc:
            if isinstance(exc, asyncssh.SFTPConnectionLost):
                raise self._lost(f"uploading the bundle to {base}", exc) from None
            # The host answered, and refused: no space, no permission.
            raise RemoteError(f"Writing {rel} to {where(self.host)}:{base} failed: {exc.reason or exc}",
                              f"Check the free disk space and the permissions of {base} on the host, then run the "
                              "export again (the files already there are kept).") from None
        except (OSError, asyncssh.Error) as exc:
            raise self._lost(f"uploading the bundle to {base}", exc) from None
        return {"dir": base, "sent": len(todo), "skipped": skipped, "bytes": total, "files": len(local)}

    async def _put(self, src: Path, base: str, rel: str, on_bytes: Callable[[int], None]) -> None:
        parent = str(PurePosixPath(base, rel).parent)
        if parent != base:
            await self.sftp.makedirs(parent, exist_ok=True)
        last = {"t": 0.0}

        def handler(_src: bytes, _dst: bytes, copied: int, size: int) -> None:
            now = time.monotonic()
            if now - last["t"] >= 0.25 or copied == size:  # a progress event per block would flood the log
                last["t"] = now
                on_bytes(copied)

        await self.sftp.put(str(src), f"{base}/{rel}{PART}", preserve=True, progress_handler=handler)

    async def _rename(self, old: str, new: str) -> None:
        import asyncssh

        try:
            await self.sftp.posix_rename(old, new)  # OpenSSH's extension: replaces new atomically
        except asyncssh.SFTPOpUnsupported:
            with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                await self.sftp.remove(new)
            await self.sftp.rename(old, new)

    async def _verify(self, base: str, expected: dict[str, tuple[int, str]], suffix: str) -> None:
        """Check size and sha256 of files on the host; a bad one is removed (so the next upload sends it)."""
        if not expected:
            return
        got = await self._python(HOST_HELPER, "files", {"dir": base, "files": {
            rel + suffix: size for rel, (size, _sha) in expected.items()}})
        bad = [rel for rel, (size, sha) in expected.items() if got.get(rel + suffix) != [size, sha]]
        if bad:
            for rel in bad:
                with contextlib.suppress(Exception):
                    await self.sftp.remove(f"{base}/{rel}{suffix}")
            raise RemoteError(f"{', '.join(bad)} on {where(self.host)} differ from the bundle after the upload "
                              f"(size or sha256); {MANIFEST} was not written",
                              "Check the free disk space in the host's work folder, then run the export again.")

    # ---- scripts
    async def run_script(self, remote_dir: str, script: str, on_line: Callable[[str], None],
                         timeout: float = BUILD_TIMEOUT_S, should_stop: Callable[[], bool] = lambda: False) -> int:
        """Run ``bash script`` in remote_dir, streaming stdout+stderr lines as they come; returns its exit code.

        When should_stop() turns true (polled 4 times a second) or the timeout passes, the script's process group
        is killed on the host (TERM, then KILL after 5 s). A stop returns the exit code it ended with; a timeout
        raises RemoteError."""
        import asyncssh

        if self.path_extra is None:
            await self.probe()
        extra = ":".join(shlex.quote(p) for p in self.path_extra or [TRT_BIN])
        env = f'export PATH="$PATH":{extra}'
        if self.trtexec_path:
            env += f" TRTEXEC={shlex.quote(self.trtexec_path)}"
        # sshd runs the command's shell as a session (and process group) leader; exec keeps that pid for bash.
        command = (f"cd {ssh.remote_path(remote_dir)} && {env} && echo {PID_MARK}$$ && "
                   f"exec bash {shlex.quote(script)} </dev/null")
        state: dict[str, Any] = {"pid": None}

        async def pump(proc: Any) -> None:
            async for raw in proc.stdout:
                if not raw:
                    continue  # the reader's end, not a line (an empty line is "\n")
                line = raw.rstrip("\r\n")
                if state["pid"] is None and line.startswith(PID_MARK):
                    state["pid"] = int(line[len(PID_MARK):])
                    continue
                on_line(line)

        try:
            proc = await self.conn.create_process(command, stderr=asyncssh.STDOUT, encoding="utf-8",
                                                  errors="replace")
        except (OSError, asyncssh.Error) as exc:
            raise self._lost(f"starting {script}", exc) from None
        task = asyncio.create_task(pump(proc))
        deadline = time.monotonic() + timeout
        timed_out = stopped = False
        while not task.done():
            await asyncio.wait({task}, timeout=0.25)
            if task.done():
                break
            timed_out = time.monotonic() > deadline
            if timed_out or should_stop():
                stopped = True
                await self._kill(state, task)
                break
        try:
            await asyncio.wait_for(asyncio.shield(task), 15)
            task.result()  # a lost connection surfaces here
            await asyncio.wait_for(proc.wait(), 15)
        except asyncio.TimeoutError:
            task.cancel()
            proc.close()  # a stopped script whose output never ended (something outside its group holds it)
            if not stopped:
                raise self._lost(f"running {script} (it may still be running there)",
                                 ConnectionError("no output end and no exit status came back")) from None
        except (OSError, asyncssh.Error) as exc:
            task.cancel()
            proc.close()
            raise self._lost(f"running {script} (it may still be running there)", exc) from None
        if timed_out:
            raise RemoteError(f"{script} on {where(self.host)} did not finish within {timeout:.0f} s and was stopped",
                              "The device may be overloaded or the model too big for it; try a smaller max_batch.")
        if proc.exit_status is None and proc.exit_signal is None:
            if stopped:
                return -9
            raise self._lost(f"running {script}", ConnectionError("no exit status came back"))
        return proc.returncode

    async def _kill(self, state: dict[str, Any], task: asyncio.Task) -> None:
        """TERM the script's process group (trtexec with it), then KILL it if it is still there after 5 s.

        ``kill -SIG -PGID``: the form both bash and dash (a login shell may be either) take."""
        for _ in range(20):  # the pid is the script's first line; a stop right at the start waits for it
            if state["pid"] or task.done():
                break
            await asyncio.sleep(0.25)
        if not state["pid"] or task.done():
            return
        for sig, wait in (("TERM", 5.0), ("KILL", 0.0)):
            try:
                await ssh.run(self.conn, self.host, ["kill", f"-{sig}", f"-{state['pid']}"], timeout=30)
            except RemoteError as exc:
                raise LinkLost(str(exc), exc.hint) from None
            if wait:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), wait)
                if task.done():
                    return


def probe(host: HostSpec, known_hosts: Path, trtexec: bool = True) -> dict[str, Any]:
    """The host's facts (JetsonLink.probe) over a connection of its own; RemoteError becomes JobFailed."""

    async def _probe() -> dict[str, Any]:
        link = JetsonLink(host, known_hosts)
        try:
            await link.connect()
            return await link.probe(trtexec)
        finally:
            link.close()

    try:
        return asyncio.run(_probe())
    except RemoteError as exc:
        raise JobFailed(str(exc), exc.hint) from None


def _failed(host: HostSpec, script: str, rc: int, tail: collections.deque, hint: str) -> JobFailed:
    lines = "\n".join(f"  {line}" for line in tail) or "  (no output)"
    return JobFailed(f"{script} failed on {host.name} (exit {rc}); its last lines:\n{lines}", hint)


def deploy(host: HostSpec, known_hosts: Path, bundle_dir: Path, remote_dir: str, *, on_event: OnEvent,
           should_stop: Callable[[], bool] = lambda: False, build: bool = True, benchmark: bool = True,
           facts: dict[str, Any] | None = None, build_timeout: float = BUILD_TIMEOUT_S,
           bench_timeout: float = BENCH_TIMEOUT_S, runtime: str = "tensorrt") -> dict[str, Any]:
    """probe -> upload -> the build script -> benchmark.sh -> the parsed figures (see the module docstring).

    ``runtime``: ``tensorrt`` (build_engine.sh with trtexec, which must be there; trtexec's summary) or
    ``llama.cpp`` (a language model's bundle: build_llama_cpp.sh uses or builds llama.cpp; llama-bench's
    figures). ``facts``: a probe already made (by deploy.probe) for this host, not asked again. Returns {host,
    remote_dir, facts: {jetson, trtexec}, upload, build: {rc, seconds}, benchmark}, and ``stopped: <stage>``
    when should_stop() ended it early. Failures raise JobFailed with what to do."""
    from engine.export import llama_bench, trtexec

    tensorrt = runtime == "tensorrt"
    build_script = BUILD_SCRIPT if tensorrt else LLM_BUILD_SCRIPT
    parse = trtexec.parse_output if tensorrt else llama_bench.parse_output
    hints = _HINTS if tensorrt else _LLM_HINTS
    result: dict[str, Any] = {"host": host.name, "remote_dir": remote_dir, "runtime": runtime}
    stage = {"now": "connecting"}

    async def _run() -> dict[str, Any]:
        link = JetsonLink(host, known_hosts)
        try:
            await link.connect()
            stage["now"] = "probing"
            if facts and (facts.get("trtexec") or not tensorrt):
                found = facts
                link.use_facts(facts)
            else:
                found = await link.probe(trtexec=tensorrt)
            result["facts"] = {"jetson": found.get("jetson"), "trtexec": found.get("trtexec")}
            if tensorrt and build and not (found.get("trtexec") or {}).get("path"):
                raise JobFailed(f"trtexec was not found on {where(host)} (looked in $TRTEXEC, PATH, {TRT_BIN} and "
                                f"{_dirname(found)})",
                                "Install TensorRT with JetPack (sudo apt install nvidia-jetpack), or set TRTEXEC "
                                "to its path in the login shell's environment.")
            stage["now"] = "uploading"
            if should_stop():
                return {**result, "stopped": "probe"}
            result["upload"] = await link.upload(
                bundle_dir, remote_dir,
                lambda sent, total, message: on_event("upload", sent / total if total else 1.0, message), should_stop)
            result["remote_dir"] = base = result["upload"].pop("dir")
            if result["upload"].pop("stopped", False) or should_stop():
                return {**result, "stopped": "upload"}
            on_event("upload", 1.0, f"bundle complete on {host.name}:{base}")
            steps = [(build_script, "build", build_timeout)] if build else []
            steps += [(BENCH_SCRIPT, "benchmark", bench_timeout)] if benchmark else []
            for script, name, limit in steps:
                stage["now"] = f"running {script}"
                tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
                lines: list[str] = []

                def on_line(line: str, name: str = name, tail: collections.deque = tail,
                            lines: list[str] = lines) -> None:
                    tail.append(line)
                    lines.append(line)
                    on_event(name, line)

                start = time.monotonic()
                rc = await link.run_script(base, script, on_line, timeout=limit, should_stop=should_stop)
                seconds = round(time.monotonic() - start, 2)
                if should_stop():  # killed on the host: its rc and output say nothing about the model
                    return {**result, "stopped": name}
                if rc != 0:
                    raise _failed(host, script, rc, tail, hints[name])
                if name == "build":
                    result["build"] = {"rc": rc, "seconds": seconds}
                else:
                    try:
                        result["benchmark"] = parse("\n".join(lines))
                    except ValueError as exc:
                        raise JobFailed(f"{script} on {host.name} ended without {'trtexec' if tensorrt else 'llama-bench'}'s "
                                        f"figures: {exc}",
                                        "Run bash benchmark.sh in the bundle's folder on the device and read its "
                                        "output (benchmark.log).") from None
            return result
        finally:
            link.close()

    try:
        return asyncio.run(_run())
    except LinkLost as exc:
        again = {"uploading": "run the export again: the upload resumes (the files already on the host are kept; "
                              "only missing or changed ones are sent).",
                 f"running {build_script}": "run the export again: the bundle on the host is complete and is not "
                                            "sent again; the build runs again.",
                 f"running {BENCH_SCRIPT}": "run the export again: the bundle on the host is not sent again."}
        raise JobFailed(str(exc), f"Check the network, then {again.get(stage['now'], 'run the export again.')}") \
            from None
    except RemoteError as exc:
        raise JobFailed(str(exc), exc.hint) from None


def _dirname(facts: dict[str, Any]) -> str:
    return str(PurePosixPath((facts.get("python") or {}).get("path") or "python").parent)


_HINTS = {
    "build": "Read the device's output (above, and in the run's log): an unsupported operator or opset means exporting with an older opset "
             "or another precision; 'out of memory' means a smaller workspace_mb or max_batch; a manifest or "
             "sha256 error means the bundle changed after it was written (export it again).",
    "benchmark": "Read the device's output (above, and in the run's log): an engine built by another TensorRT version must be rebuilt "
                 "(run the export again); shapes outside the profile need a larger max_batch.",
}
_LLM_HINTS = {
    "build": "Read the device's output (above, and in the run's log): a missing cmake or compiler means "
             "sudo apt install cmake build-essential on the device; a manifest or sha256 error means the bundle "
             "changed after it was written (export it again).",
    "benchmark": "Read the device's output (above, and in the run's log): 'out of memory' or a failed load means "
                 "a smaller GGUF type (jetson_gguf), or fewer layers on the GPU (EMBER_NGL on the device).",
}
