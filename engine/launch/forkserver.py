"""A warm process that has imported PyTorch once and forks each job's process from it.

A job process spends its first seconds importing PyTorch (4 s on an idle 2-core machine, 10 s on a busy one)
before it reads a row. The fork server imports it once; each single-process job on this machine is then a
fork of it that sets up its own session, folder, output file and environment and runs the job's module as
``python -m`` would. PyTorch forks this way in every DataLoader worker; the server never touches CUDA, so a
forked job may still use a GPU.

One server per user, Python and PyTorch install and load-time environment (below), shared by every engine of
that user on this machine (the socket's name carries a hash of them), in a folder only its user may open; a connection from another user is
refused. The engine starts it the first time it starts a job (that job does not wait for it: it starts the
usual way) and uses it once it answers. It exits after IDLE_S without requests or live jobs.

Variables read when a library is loaded (OpenMP's wait policy, ``PYTHONPATH``, ``CUDA_VISIBLE_DEVICES``,
...) are the server's for every job it forks: a job whose values differ goes to another server (the socket's
name carries them), and a server refuses a job whose values are not its own, so a forked job always runs as a
fresh process would. ``OMP_NUM_THREADS`` may differ: PyTorch reads it at the job's
first parallel region, after the fork; so may what torchrun gives each of its workers (``TORCHELASTIC_*``).

A worker of a multi-process run is forked too: torchrun starts ``engine/launch/forked_worker.py`` in its
place, which asks for a fork *tied* to its connection, passes on the signals torchrun sends and exits as the
worker did; should it die, the server kills the worker (a SIGKILL to torchrun's workers reaches them).

Protocol (one connection per job, JSON lines): the engine sends ``{"module", "args", "cwd", "env",
"output", "tied"}``; the server answers ``{"pid"}`` (or ``{"refused": why}``), then ``{"exit": code}`` when the
process ends (negative: the signal that ended it, as subprocess reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

IDLE_S = 900.0
# Variables a library reads when it is loaded (or Python at start): a job must see the server's values.
LOAD_TIME = ("PYTHON", "LD_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "CUDA_", "HIP_", "ROCR_", "NVIDIA_",
             "TORCH", "PYTORCH_", "MALLOC_", "TQDM_", "TRITON_", "SCIPY_")
# Read later, so each job may have its own: PyTorch reads the thread caps at the first parallel region, after
# the fork; torchrun's per-worker variables are read when the process group starts; the compiler's cache
# folder when it first compiles (importing the compiler sets it: a job that imported it must not key a server).
PER_JOB = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCHELASTIC_", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
           "TORCHINDUCTOR_CACHE_DIR")
# The server's own: NumPy's OpenBLAS would otherwise start a thread at import, and a process forked while
# another of its threads runs may inherit a lock that thread held. Jobs do their arithmetic in PyTorch.
SERVER_ONLY = {"OPENBLAS_NUM_THREADS": "1"}
DISABLE = "EMBER_FORKSERVER"  # 0: every job starts as a fresh Python process


def load_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(LOAD_TIME) and not k.startswith(PER_JOB) and k not in SERVER_ONLY}


def available() -> bool:
    """Fork can start jobs here (macOS: a fork after loading system libraries is unsafe)."""
    return hasattr(os, "fork") and sys.platform != "darwin"


def socket_path(env: dict[str, str] | None = None) -> Path | None:
    """This user's server for this Python, this PyTorch and the load-time variables of ``env`` (the engine's
    own environment by default); None where fork is not available."""
    if not available():
        return None
    spec = find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        stamp = os.stat(spec.origin).st_mtime_ns
    except OSError:
        return None
    folder = Path(tempfile.gettempdir()) / f"ember-{os.getuid()}"
    if not _private_dir(folder):  # another user's folder, or one others may write: never send it a job
        return None
    loaded = sorted(load_time_env(dict(os.environ) if env is None else env).items())
    key = hashlib.sha256(f"{sys.executable}|{spec.origin}|{stamp}|{Path(__file__).stat().st_mtime_ns}|{loaded}"
                         .encode())
    return folder / f"fork-{key.hexdigest()[:16]}.sock"


def _private_dir(folder: Path) -> bool:
    """The folder exists, is this user's and nobody else may open it."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and (st.st_mode & 0o077) == 0 and not Path(folder).is_symlink()


class ForkedProcess:
    """What the engine holds of a forked job: its pid and, through the connection, its exit code
    (``poll()`` answers like ``subprocess.Popen.poll``; "unknown" if the server went away first)."""

    def __init__(self, conn: socket.socket, pid: int):
        self.conn, self.pid = conn, pid
        self.returncode: int | str | None = None
        self._buffer = b""

    def poll(self) -> int | str | None:
        if self.returncode is not None:
            return self.returncode
        try:
            chunk = self.conn.recv(4096)
        except BlockingIOError:
            return None
        except OSError:
            chunk = b""
        if chunk:
            self._buffer += chunk
            if b"\n" in self._buffer:
                self.returncode = int(json.loads(self._buffer.split(b"\n", 1)[0])["exit"])
                self.conn.close()
            return self.returncode
        self.conn.close()  # the server ended before the job: its exit code is lost
        self.returncode = _gone_or_alive(self.pid)
        return self.returncode

    def wait(self) -> int | str:
        """Block until the process ends: its exit code, or "unknown" once it is gone and the server with it."""
        self.conn.setblocking(True)
        while (code := self.poll()) is None:
            time.sleep(0.5)  # the server ended first: follow the pid
        return code


def _gone_or_alive(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "unknown"
    except PermissionError:
        pass
    return None


def start(module: str, args: list[str], cwd: Path, env: dict[str, str], output: Path | None = None,
          fds: tuple[int, int, int] | None = None, tied: bool = False) -> ForkedProcess | None:
    """The job's process forked by this user's server; None when there is none yet (one is started for the
    next job) or it refused: start the job the usual way then. Its output goes to the file ``output``, or
    its stdin, stdout and stderr are ``fds`` (sent to the server with the request). ``tied``: the server
    kills the process if this connection closes before it ends (its asker died)."""
    path = _usable_path(env)
    if path is None:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(3)  # a fork takes milliseconds; the engine waits on this
    try:
        conn.connect(str(path))
        request = {"module": module, "args": args, "cwd": str(cwd), "env": env,
                   "output": None if output is None else str(output), "tied": tied}
        data = json.dumps(request).encode() + b"\n"
        sent = socket.send_fds(conn, [data], list(fds)) if fds else 0
        conn.sendall(data[sent:])
        reply = json.loads(_read_line(conn))
    except (OSError, ValueError):
        conn.close()
        _start_server(path, env)
        return None
    if "pid" not in reply:
        conn.close()
        return None
    conn.setblocking(False)
    return ForkedProcess(conn, int(reply["pid"]))


class PipedProcess:
    """A forked process with pipes, as ``asyncio.create_subprocess_exec`` would hand back (``pid``, ``stdin``,
    ``stdout``, ``stderr``, ``returncode``, ``wait``, ``kill``, ``communicate``)."""

    def __init__(self, forked: ForkedProcess, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader | None):
        self.forked, self.pid = forked, forked.pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr

    @property
    def returncode(self) -> int | None:
        code = self.forked.poll()
        return -1 if code == "unknown" else code  # type: ignore[return-value]

    async def wait(self) -> int:
        while (code := self.returncode) is None:
            await asyncio.sleep(0.05)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    async def communicate(self, data: bytes = b"") -> tuple[bytes, bytes]:
        self.stdin.write(data)
        await self.stdin.drain()
        self.stdin.close()
        out, err = await asyncio.gather(self.stdout.read(), self.stderr.read() if self.stderr else _nothing())
        await self.wait()
        return out, err


async def _nothing() -> bytes:
    return b""


async def start_piped(module: str, args: list[str], env: dict[str, str], pipe_stderr: bool,
                      limit: int = 2**16) -> PipedProcess | None:
    """``module`` forked with its stdin and stdout (and stderr if ``pipe_stderr``, else the engine's) as pipes
    to this process, in a session of its own; None as ``start`` answers it."""
    loop = asyncio.get_running_loop()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe() if pipe_stderr else (-1, os.dup(2))
    theirs, ours = (in_r, out_w, err_w), [in_w, out_r, *([err_r] if pipe_stderr else [])]
    try:
        forked = start(module, args, Path.cwd(), env, fds=theirs)
    finally:
        for fd in theirs:
            os.close(fd)
    if forked is None:
        for fd in ours:
            os.close(fd)
        return None
    stdout = asyncio.StreamReader(limit=limit, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout, loop=loop), os.fdopen(out_r, "rb", 0))
    stderr = None
    if pipe_stderr:
        stderr = asyncio.StreamReader(limit=limit, loop=loop)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stderr, loop=loop),
                                     os.fdopen(err_r, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(lambda: asyncio.streams.FlowControlMixin(loop=loop),
                                                        os.fdopen(in_w, "wb", 0))
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    return PipedProcess(forked, stdin, stdout, stderr)


def _usable_path(env: dict[str, str]) -> Path | None:
    """The socket for ``env``, unless fork is unavailable or turned off (EMBER_FORKSERVER=0)."""
    if env.get(DISABLE) == "0" or os.environ.get(DISABLE) == "0":
        return None
    return socket_path(env)


def ready(env: dict[str, str]) -> bool:
    """A server for ``env`` answers at this user's socket."""
    path = _usable_path(env)
    if path is None:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def warm(env: dict[str, str]) -> bool:
    """True when a server for ``env`` answers; else one is started for later requests, and False."""
    path = _usable_path(env)
    if path is None:
        return False
    if ready(env):
        return True
    _start_server(path, env)
    return False


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise OSError("the fork server closed the connection")
        data += chunk
    return data.split(b"\n", 1)[0]


_STARTED: dict[Path, float] = {}


def _start_server(path: Path, env: dict[str, str]) -> None:
    """Start the server in the background (not more than once a minute from this engine)."""
    import subprocess

    if time.monotonic() - _STARTED.get(path, -1e9) < 60:
        return
    _STARTED[path] = time.monotonic()
    server_env = {k: v for k, v in env.items() if not k.startswith((*PER_JOB, "EMBER_RUN"))}
    server_env.update(SERVER_ONLY)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        # It leaves at once, leaving the server to run on as nobody's child (a worker that starts it and
        # then becomes a job must not carry it among its children, nor leave it a zombie).
        subprocess.Popen([sys.executable, "-m", "engine.launch.forkserver", str(path)], env=server_env, cwd="/",
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True).wait(timeout=10)


# ---- the server


class Server:
    def __init__(self, path: Path, env: dict[str, str], lock: int = -1):
        self.path, self.lock = path, lock
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.selector = selectors.DefaultSelector()
        self.conns: dict[socket.socket, bytes] = {}
        self.fds: dict[socket.socket, list[int]] = {}  # descriptors a request came with (its stdin, stdout, stderr)
        self.children: dict[int, socket.socket | None] = {}
        self.tied: dict[socket.socket, int] = {}  # a tied child's connection: closed early, the child is killed
        self.env = load_time_env(env)  # as started: an import may set some (torch sets its compile cache)
        self.last = time.monotonic()

    def bind(self) -> bool:
        """Listen at the socket, unless another server already answers there."""
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(OSError):
            probe.connect(str(self.path))
            probe.close()
            return False
        probe.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old = os.umask(0o077)
        try:
            self.listener.bind(str(self.path))
        finally:
            os.umask(old)
        self.listener.listen(16)
        self.selector.register(self.listener, selectors.EVENT_READ)
        return True

    def serve(self) -> dict[str, Any] | None:
        """Until idle: None. In a forked child: the request it is to run."""
        while True:
            for key, _ in self.selector.select(timeout=0.5):
                sock = key.fileobj
                if sock is self.listener:
                    self._accept()
                    continue
                if sock in self.tied:
                    self._asker_gone(sock)
                    continue
                request = self._read(sock)
                if request is not None:
                    child = self._fork(sock, request)
                    if child is not None:
                        return child
            self._reap()
            if not self.children and not self.conns and time.monotonic() - self.last > IDLE_S:
                with contextlib.suppress(OSError):
                    self.path.unlink()
                return None

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()
            return
        self.conns[conn] = b""
        self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> dict[str, Any] | None:
        try:
            chunk, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        except OSError:
            chunk, fds = b"", []
        self.fds.setdefault(conn, []).extend(fds)
        if not chunk:
            self._drop(conn)
            return None
        self.conns[conn] += chunk
        if b"\n" not in self.conns[conn]:
            return None
        line = self.conns[conn].split(b"\n", 1)[0]
        self.selector.unregister(conn)
        del self.conns[conn]
        try:
            request = json.loads(line)
        except ValueError:
            self._drop(conn)
            return None
        request["fds"] = self.fds.pop(conn, [])
        return request

    def _drop(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        self.conns.pop(conn, None)
        for fd in self.fds.pop(conn, []):
            with contextlib.suppress(OSError):
                os.close(fd)
        conn.close()

    def _fork(self, conn: socket.socket, request: dict[str, Any]) -> dict[str, Any] | None:
        self.last = time.monotonic()
        env = request.get("env") or {}
        differ = sorted(set(load_time_env(env).items()) ^ set(self.env.items()))
        fds = request.get("fds") or []
        if differ or len(fds) not in (0, 3) or (not fds and not request.get("output")):
            why = f"{differ[0][0]} differs from the fork server's" if differ else "give an output file or 3 descriptors"
            _send(conn, {"refused": why})
            self._drop(conn)
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._close_all(conn)
            return request
        for fd in fds:  # the child's now
            os.close(fd)
        sent = _send(conn, {"pid": pid})
        self.children[pid] = conn if sent else None
        if request.get("tied"):
            if sent:
                self.tied[conn] = pid
                self.selector.register(conn, selectors.EVENT_READ)
            else:
                _kill_group(pid)
        return None

    def _asker_gone(self, conn: socket.socket) -> None:
        """A tied connection is readable: the asker never writes, so it closed (it died): kill its child."""
        try:
            data = conn.recv(1)
        except OSError:
            data = b""
        if data:
            return
        self.selector.unregister(conn)
        _kill_group(self.tied.pop(conn))

    def _close_all(self, conn: socket.socket) -> None:
        """In the child: nothing of the server stays open."""
        self.selector.close()
        with contextlib.suppress(OSError):
            os.close(self.lock)  # the lock stays the server's: a new one may start once it is gone
        for sock in (self.listener, conn, *self.conns, *(c for c in self.children.values() if c)):
            with contextlib.suppress(OSError):
                sock.close()
        for fd in (fd for fds in self.fds.values() for fd in fds):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None and self.tied.pop(conn, None) is not None:
                self.selector.unregister(conn)
            if conn is not None:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()
            self.last = time.monotonic()


def _kill_group(pid: int) -> None:
    """The child leads its own session: its group holds it and whatever it started (DataLoader workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _send(conn: socket.socket, message: dict[str, Any]) -> bool:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
        return True
    except OSError:
        return False


def _become_the_job(request: dict[str, Any]) -> None:
    """In the forked child: what ``subprocess.Popen(["python", "-m", module, *args], cwd=..., env=...,
    stdout=output, stderr=STDOUT, stdin=DEVNULL, start_new_session=True)`` would have set up."""
    os.setsid()
    with contextlib.suppress(ImportError):
        import setproctitle  # `ps` and psutil show the job's own command line

        # Before the environment is replaced: setproctitle finds the command line's memory beside it.
        setproctitle.setproctitle(" ".join([sys.executable, "-m", request["module"], *request["args"]]))
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if request["fds"]:
        for target, fd in enumerate(request["fds"]):
            os.dup2(fd, target)
        for fd in set(request["fds"]) - {0, 1, 2}:
            os.close(fd)
    else:
        out = os.open(request["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as `python -m` run in that folder
    import torch  # noqa: TID253 - loaded already: the server's

    # PyTorch sized its pool when it was loaded, from the server's environment (no cap: every core, as a fresh
    # process without OMP_NUM_THREADS gets); the job's own cap is applied here, at most the cores it may run
    # on, as a fresh PyTorch reads it (OMP_NUM_THREADS=4 on 2 cores: 2 threads, measured here).
    threads = os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS") or ""
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(min(int(threads), len(os.sched_getaffinity(0))))
    sys.argv = [request["module"], *request["args"]]


def main(argv: list[str]) -> None:
    import runpy

    path = Path(argv[0])
    if os.fork():  # the starter waits for this process only: the server goes on in a child of its own
        os._exit(0)
    os.setsid()
    # One server per socket: a second one started meanwhile (each worker of a run may ask for one) leaves here,
    # before its imports. Held until the server ends; its children close it.
    import fcntl  # the server runs only where fork does (socket_path)

    lock = os.open(f"{path}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return
    started_with = dict(os.environ)
    # What every job imports first, once: later imports in a forked job find them loaded. Not transformers:
    # huggingface_hub reads HF_HUB_OFFLINE, HF_HOME and the endpoint when it is loaded, and a job sets them.
    import numpy  # noqa: F401
    import torch  # noqa: F401, TID253 - the point of this process
    import torch._decomp  # noqa: F401, TID253 - these parts come with transformers: 2 s more of every job
    import torch._dynamo  # noqa: F401, TID253
    import torch.distributed.tensor  # noqa: F401, TID253
    import torch.export  # noqa: F401, TID253
    import torch.nn.functional  # noqa: F401, TID253
    import torch.optim  # noqa: F401, TID253
    import torch.utils.data  # noqa: F401, TID253
    # What transformers and the vision tasks load on the way (2 s of every such job); none reads Hugging Face's
    # variables. torchao: transformers' quantizers import it whenever it is installed.
    for name in ("torchao", "torchvision", "scipy.special", "scipy.spatial", "scipy.optimize", "PIL.Image",
                 "safetensors.torch"):
        with contextlib.suppress(ImportError):
            __import__(name)

    server = Server(path, started_with, lock)
    if not server.bind():
        return
    request = server.serve()
    if request is None:
        return
    _become_the_job(request)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
