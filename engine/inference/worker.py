"""The inference worker process: loads one model, then answers requests until stdin closes.

    python -m engine.inference.worker --ref '{"builtin": "smollm2-135m-instruct"}' [--device cpu]

Protocol (one JSON object a line; docs/playground.md):
  in:  {"op": "chat", "rid": "...", "messages": [...], "settings": {...}}
       {"op": "predict", "rid": "...", "text": "..."}
       {"op": "stop", "rid": "..."}           ends that answer early (read while generating)
  out: {"event": "ready", "kind": "chat"|"classify", "info": {...}}    once, after loading
       {"event": "text", "rid": ..., "text": "..."}                    chunks of the answer, in order
       {"event": "done", "rid": ..., "stats": {...} | "result": {...}}
       {"event": "error", "rid": ..., "message": ..., "hint": ...}     (without rid: loading failed; exit 2)

Chunks are sent at most every CHUNK_S seconds (and at the end), so a fast model does not turn every
token into a message.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from typing import Any

CHUNK_S = 0.03
_out_lock = threading.Lock()


def send(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def _reader(requests: queue.Queue, stops: set[str], current: dict[str, Any]) -> None:
    """stdin in a thread, so a stop arrives while an answer is being generated."""
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            send({"event": "error", "message": "unreadable request line", "hint": "send one JSON object a line"})
            continue
        if msg.get("op") == "stop":
            stops.add(str(msg.get("rid")))
            if current.get("rid") == msg.get("rid") and current.get("model") is not None:
                current["model"].stop_event.set()
            continue
        requests.put(msg)
    requests.put(None)


def _serve_one(kind: str, model: Any, msg: dict[str, Any], stops: set[str], current: dict[str, Any]) -> None:
    from engine.training.context import JobFailed

    rid = str(msg.get("rid"))
    if rid in stops:
        send({"event": "done", "rid": rid, "stats": {"stopped": "user", "new_tokens": 0}})
        return
    try:
        if msg.get("op") == "predict":
            if kind != "classify":
                raise JobFailed("This model generates text; it does not classify", "Send it a chat message.")
            image = msg.get("image")
            result = model.predict(None if image else str(msg.get("text", "")), image)
            send({"event": "done", "rid": rid, "result": result})
            return
        if kind != "chat":
            raise JobFailed("This model is a classifier; it does not chat", "Send it text to classify.")
        from engine.api.playground import Chunks, GenerateSettings, Message

        settings = GenerateSettings.model_validate(msg.get("settings") or {})
        chunker = Chunks(lambda text: send({"event": "text", "rid": rid, "text": text}), CHUNK_S)
        current.update(rid=rid, model=model)
        try:
            messages = [Message.model_validate(m).model_dump() for m in msg.get("messages") or []]
            answer = model.answer(messages, settings, chunker)
        finally:
            current.update(rid=None)
        chunker.flush()
        send({"event": "done", "rid": rid, "stats": answer.stats()})
    except JobFailed as exc:
        send({"event": "error", "rid": rid, "message": str(exc), "hint": exc.hint})
    except (ValueError, TypeError) as exc:  # settings or messages that do not validate
        send({"event": "error", "rid": rid, "message": str(exc).splitlines()[0][:500],
              "hint": "Check the request's settings and messages."})
    except Exception as exc:  # noqa: BLE001 - one bad request must not end the worker
        import traceback

        traceback.print_exc(file=sys.stderr)
        send({"event": "error", "rid": rid, "message": f"{type(exc).__name__}: {exc}"[:500],
              "hint": "See the engine log; the model stays loaded."})
    finally:
        stops.discard(rid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.inference.worker")
    parser.add_argument("--ref", required=True, help="the model reference (JSON)")
    parser.add_argument("--device", default="auto", help="auto: the first CUDA GPU when there is one, else cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: torch's default")
    args = parser.parse_args(argv)
    from engine.training.context import JobFailed

    t0 = time.perf_counter()
    try:
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars would fill the engine log
        if args.threads:
            torch.set_num_threads(args.threads)
        if args.device == "auto":
            args.device = "cuda" if torch.cuda.is_available() else "cpu"
        from engine.inference.models import open_model

        kind, model, info = open_model(json.loads(args.ref), args.device)
    except JobFailed as exc:
        send({"event": "error", "message": str(exc), "hint": exc.hint})
        return 2
    except Exception as exc:  # noqa: BLE001 - anything that stops loading is the same to the user
        send({"event": "error", "message": f"Cannot load the model: {type(exc).__name__}: {exc}"[:800],
              "hint": "Check the model's files; the engine log has the details."})
        return 2
    send({"event": "ready", "kind": kind, "info": {**info, "load_s": time.perf_counter() - t0,
                                                    "device": args.device}})
    requests: queue.Queue = queue.Queue()
    stops: set[str] = set()
    current: dict[str, Any] = {}
    threading.Thread(target=_reader, args=(requests, stops, current), daemon=True).start()
    while (msg := requests.get()) is not None:
        _serve_one(kind, model, msg, stops, current)
    return 0


if __name__ == "__main__":
    from engine.training.context import exit_process

    exit_process(main())  # an unload waits for the process to end: no 2 s of teardown
