"""The Playground with a served endpoint against the Playground with the same model loaded directly, side by side,
and the serve job's own tokens/s against the chat line's for the same answers.

    python benchmarks/endpoint_bench.py [--model smollm2-135m-instruct] [--tokens 64] [--rounds 5]

One engine (its own data folder) runs a serve.model job of the built-in model (port 0). Both sides are
``playground.chat`` requests of a client of that engine, timed where a user sees them (request to done event,
as generate_bench.py times its worker side): *playground* names the built-in model (the Playground's worker
loads it), *endpoint* names the serve job's URL (the engine streams it from the server, no worker). Both decode
greedily the same number of tokens; the answers must be equal. The sides alternate, one answer each per round,
the medians are compared: endpoint/playground and playground/endpoint tokens/s (target: at least 0.9 each).

After each endpoint answer the benchmark waits for the serve job's next report, whose tokens/s covers that
answer alone, and compares it with the answer's chat line (the done event's tokens_per_s): one definition of
tokens/s (engine.api.playground.tokens_per_s), so they agree (target: within 10%).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generate_bench import PROMPT, report, run_rounds, setup, worker_side  # noqa: E402 - shared

TARGET = 0.9
AGREE = 0.10


def serve(client, model: str) -> tuple[str, str]:
    """(the job id, the URL) of a serve.model job of ``model`` once it listens."""
    job = client.call("jobs.start", kind="serve.model", spec={"model": {"builtin": model}, "port": 0})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        events = serving(client, job["id"])
        if events:
            return job["id"], str(events[0]["url"])
        state = client.call("jobs.get", id=job["id"])["state"]
        if state not in ("queued", "running"):
            raise SystemExit(f"the serve job ended {state}: {client.call('jobs.logs', id=job['id'])['lines'][-5:]}")
        time.sleep(1)
    raise SystemExit("the serve job did not listen within 10 minutes")


def serving(client, job_id: str) -> list[dict]:
    events = client.call("events.query", topics=[f"run/{job_id}/serving"], limit=100_000)["events"]
    return [e["data"] for e in events]


def main() -> int:
    args, _folder = setup(__doc__, "endpoint-bench")
    from engine.api import paths
    from engine.cli.client import ensure_engine

    with ensure_engine(paths.resolve(), timeout=30, client="endpoint-bench") as client:
        client.timeout = 600
        job_id, url = serve(client, args.model)
        playground = worker_side(client, {"builtin": args.model}, args.tokens)
        chat_line: list[float] = []
        served: list[float] = []

        def endpoint():
            seen = len(serving(client, job_id))
            row = ask()
            # The serve job reports every 2 s: its next report with a figure covers this answer alone.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                later = [e for e in serving(client, job_id)[seen:] if e.get("tokens_per_s") is not None]
                if later:
                    served.append(float(later[0]["tokens_per_s"]))
                    chat_line.append(last_done[0]["tokens_per_s"])
                    break
                time.sleep(0.2)
            return row

        last_done: list[dict] = [{}]
        from engine.cli.chat import stream_answer

        def ask():
            t0 = time.perf_counter()
            first: list[float] = []
            done = stream_answer(client, {"url": url}, PROMPT, {"temperature": 0, "max_new_tokens": args.tokens},
                                 lambda _t: first or first.append(time.perf_counter()))
            last_done[0] = done
            return done["text"], int(done["new_tokens"]), first[0] - t0, time.perf_counter() - t0

        playground()  # load the worker (the Playground keeps it warm) and warm both sides up
        endpoint()
        chat_line.clear()
        served.clear()
        rows = run_rounds({"playground": playground, "endpoint": endpoint}, args.rounds)
        print(f"model {args.model}, {rows['playground'][0][1]} new tokens, greedy, {args.rounds} rounds; "
              f"endpoint: serve job {job_id} at {url}")
        there = report(rows, "playground", "endpoint", TARGET)
        back = 1 / there
        print(f"ratio playground/endpoint tokens/s: {back:.3f} (target >= {TARGET})")
        gaps = [abs(s / c - 1) for s, c in zip(served, chat_line, strict=True) if c]
        print("chat line vs serve job, tokens/s of the same answers: "
              + ", ".join(f"{c:.1f}/{s:.1f}" for c, s in zip(chat_line, served, strict=True))
              + f"; largest difference {max(gaps, default=float('nan')):.1%} (target <= {AGREE:.0%})")
        client.call("jobs.stop", id=job_id)
        client.call("engine.shutdown")  # the benchmark's own engine (its data folder is a temporary one)
        ok = there >= TARGET and back >= TARGET and gaps and statistics.mean(gaps) <= AGREE and max(gaps) <= AGREE
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
