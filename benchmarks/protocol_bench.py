"""Protocol speed: request/reply round trip (Unix socket, and TCP with TLS) and event fan-out, against a real engine.

    python benchmarks/protocol_bench.py [--pings 3000] [--events 60000]

Prints round-trip p50/p99 of `ping` beside the same loop against a bare asyncio
Unix-socket echo server (the floor any Python server on this machine has), and
event fan-out throughput to 1 and 4 subscriber processes, each parsing every
event. Ratios are against the targets: p50 under 1 ms, fan-out at least
20,000 events/s per subscriber.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.api import paths as paths_mod  # noqa: E402
from engine.cli.client import BlockingClient, EngineNotRunning  # noqa: E402

RTT_TARGET_MS = 1.0
FANOUT_TARGET = 20_000


def start_engine(home: Path) -> subprocess.Popen:
    env = dict(os.environ, EMBER_HOME=str(home), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    os.environ["EMBER_HOME"] = str(home)
    for _ in range(400):
        try:
            BlockingClient.connect(paths_mod.resolve()).close()
            return proc
        except (EngineNotRunning, ConnectionError, FileNotFoundError):
            time.sleep(0.05)
    raise SystemExit("engine did not start")


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def rtt_engine(n: int, tls: bool = False) -> list[float]:
    """``ping`` round trips on the local socket, or (``tls``) over TCP with TLS as a user."""
    with _client(tls) as c:
        for _ in range(200):
            c.call("ping")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            c.call("ping")
            out.append((time.perf_counter() - t0) * 1000)
        return out


def _client(tls: bool) -> BlockingClient:
    if not tls:
        return BlockingClient.connect()
    from engine.api.remote_engine import KnownEngines

    with BlockingClient.connect() as admin:
        listen = admin.call("engine.status")["tls"]
        token = admin.call("users.add", name=f"bench{time.monotonic_ns()}", role="viewer")["token"]
    known = KnownEngines(Path(tempfile.mkdtemp(prefix="ember-bench-known-")) / "known.json")
    known.accept(listen["listen"], listen["fingerprint"])
    return BlockingClient.connect_tls(listen["listen"], token, known)


def rtt_echo_anchor(n: int) -> list[float]:
    """The same request/reply loop against a minimal asyncio echo server."""
    path = Path(tempfile.mkdtemp()) / "echo.sock"
    ready = threading.Event()

    async def handle(reader, writer):
        while line := await reader.readline():
            msg = json.loads(line)
            writer.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"t": time.time()}}).encode() + b"\n")
            await writer.drain()

    def serve():
        async def main():
            server = await asyncio.start_unix_server(handle, path=str(path))
            ready.set()
            async with server:
                await server.serve_forever()
        asyncio.run(main())

    # The echo server runs in another process so the loop pays the same context switches.
    proc = mp.get_context("fork").Process(target=serve, daemon=True)
    proc.start()
    while not path.exists():
        time.sleep(0.01)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    f = s.makefile("rb")
    out = []
    for i in range(n + 200):
        t0 = time.perf_counter()
        s.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode() + b"\n")
        json.loads(f.readline())
        if i >= 200:
            out.append((time.perf_counter() - t0) * 1000)
    proc.kill()
    return out


def subscriber(home: str, expect: int, ready, results) -> None:
    os.environ["EMBER_HOME"] = home
    with BlockingClient.connect(client="bench-sub") as c:
        c.subscribe(["diag/bench"])
        ready.set()
        got, first, last = 0, None, None
        while got < expect:
            ev = c.next_event(timeout=60)
            if ev is None:
                break
            if first is None:
                first = time.time()
            got += 1
            last = time.time()
        results.put((got, first, last))


def fanout(home: Path, subscribers: int, events: int, batch: int = 5000) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    readies = [ctx.Event() for _ in range(subscribers)]
    procs = [ctx.Process(target=subscriber, args=(str(home), events, r, results)) for r in readies]
    for p in procs:
        p.start()
    for r in readies:
        r.wait(60)
    with BlockingClient.connect(client="bench-pub") as c:
        t0 = time.time()
        for _ in range(events // batch):
            c.call("diag.burst", topic="diag/bench", count=batch, payload_bytes=64)
    outs = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(10)
    delivered = min(o[0] for o in outs)
    end = max(o[2] for o in outs)
    return events / (end - t0), delivered


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pings", type=int, default=3000)
    ap.add_argument("--events", type=int, default=60_000)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ember-bench-"))
    proc = start_engine(home)
    try:
        eng = rtt_engine(args.pings)
        anchor = rtt_echo_anchor(args.pings)
        p50, p99 = statistics.median(eng), percentile(eng, 0.99)
        a50, a99 = statistics.median(anchor), percentile(anchor, 0.99)
        print(f"round trip (ping, {args.pings} calls): p50 {p50:.3f} ms  p99 {p99:.3f} ms")
        print(f"  anchor, bare asyncio echo server:    p50 {a50:.3f} ms  p99 {a99:.3f} ms"
              f"  -> engine/anchor p50 ratio {p50 / a50:.2f}")
        print(f"  p50 vs target {RTT_TARGET_MS} ms: ratio {p50 / RTT_TARGET_MS:.2f} "
              f"({'meets' if p50 < RTT_TARGET_MS else 'MISSES'} target)")
        tls = rtt_engine(args.pings, tls=True)
        t50, t99 = statistics.median(tls), percentile(tls, 0.99)
        print(f"  over TCP with TLS (a user, 127.0.0.1): p50 {t50:.3f} ms  p99 {t99:.3f} ms"
              f"  -> TLS/Unix-socket p50 ratio {t50 / p50:.2f}")
        for n in (1, 4):
            rate, delivered = fanout(home, n, args.events)
            print(f"fan-out to {n} subscriber(s): {rate:,.0f} events/s per subscriber "
                  f"({delivered:,}/{args.events:,} delivered to each), "
                  f"ratio vs {FANOUT_TARGET:,}/s target {rate / FANOUT_TARGET:.2f} "
                  f"({'meets' if rate >= FANOUT_TARGET and delivered == args.events else 'MISSES'} target)")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
