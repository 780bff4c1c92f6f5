"""``ember chat MODEL "question"`` and ``ember predict MODEL "text"``: the Playground from a terminal.

MODEL is a finished job's id, a built-in model's name, a model folder, or a Hub id in the Hugging Face
cache. Answers stream as they are generated; the speed figures go to stderr (``--json``: one object).
Without a question, ``ember chat`` reads one question a line from stdin and keeps the conversation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from engine.api.playground import TEMPLATE_NAMES, answer_figures
from engine.api.protocol import INTERNAL_ERROR, RpcError
from engine.api.train_spec import BUILTIN_MODEL_CHOICES
from engine.cli.client import BlockingClient, ensure_engine

BUILTINS = {name for names in BUILTIN_MODEL_CHOICES.values() for name in names}
PATH_STARTS = ("/", "./", "../", "~")
MODEL_FILE_SUFFIXES = (".gguf", ".onnx", ".pt", ".pt2", ".pth", ".safetensors", ".engine", ".plan")


def model_ref(text: str) -> dict[str, Any]:
    """What MODEL means: a built-in, an existing folder or file, a served endpoint's URL, a Hub id (owner/name),
    else a job id."""
    if text.startswith(("http://", "https://")):
        return {"url": text}
    if text in BUILTINS:
        return {"builtin": text}
    # A path before any Hub id: an existing folder or file (a .gguf file, an ONNX folder), or anything written
    # as a path or named like a model file, which the engine then reports as missing rather than asking the Hub.
    local = os.path.expanduser(text)
    if os.path.exists(local) or text.startswith(PATH_STARTS) or text.lower().endswith(MODEL_FILE_SUFFIXES):
        return {"path": os.path.abspath(local)}
    if "/" in text:
        repo, _, revision = text.partition("@")
        return {"hub": repo, **({"revision": revision} if revision else {})}
    return {"run": text}


def stream_answer(client: BlockingClient, ref: dict[str, Any], messages: list[dict[str, str]],
                  settings: dict[str, Any], on_text: Callable[[str], None] = lambda _t: None,
                  on_status: Callable[[dict[str, Any]], None] = lambda _d: None,
                  timeout: float = 600.0) -> dict[str, Any]:
    """Ask for an answer and follow its events to the end: the done event's data (text added)."""
    start = client.call("playground.chat", model=ref, messages=messages, settings=settings)
    sub = client.subscribe([start["topic"]], since=start["since"])
    text = []
    try:
        while True:
            ev = client.next_event(timeout)
            if ev is None:
                raise TimeoutError(f"no answer from {start['model']} within {timeout:.0f} s")
            if ev.get("topic") != start["topic"]:
                continue
            data = ev.get("data") or {}
            if "text" in data:
                text.append(data["text"])
                on_text(data["text"])
            elif data.get("done"):
                return {**data, "text": "".join(text), "request": start["request"]}
            elif "error" in data:
                raise RpcError(INTERNAL_ERROR, data["error"], {"hint": data.get("hint", "")})
            else:
                on_status(data)
    finally:
        client.call("unsubscribe", subscription=sub)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    out = {"template": args.template, "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
           "max_new_tokens": args.max_new_tokens, "repetition_penalty": args.repetition_penalty,
           "stop": args.stop or [], "seed": args.seed}
    if args.system:
        out["system"] = args.system
    return out


def _speed(done: dict[str, Any]) -> str:
    ttft = done.get("ttft_s")
    first = f", first token after {ttft:.2f} s" if ttft is not None else ""
    return (f"[{done.get('new_tokens', 0)} tokens in {done.get('seconds', 0):.2f} s, "
            f"{done.get('tokens_per_s', 0):.1f} tokens/s{first}; stopped: {done.get('stopped')}]")


def cmd_chat(args: argparse.Namespace) -> int:
    ref, settings = model_ref(args.model), _settings(args)
    if args.api_key_file:
        if "url" not in ref:
            print("error: --api-key-file goes with a served endpoint's URL (http://host:port/v1)", file=sys.stderr)
            return 2
        if os.environ.get("EMBER_ENGINE"):
            # A team engine reads no file a client names: the key travels itself (never kept by the engine).
            try:
                ref["api_key"] = open(os.path.expanduser(args.api_key_file), encoding="utf-8").read().strip()
            except OSError as exc:
                print(f"error: cannot read {args.api_key_file}: {exc.strerror or exc}", file=sys.stderr)
                return 2
        else:
            ref["api_key_file"] = os.path.abspath(os.path.expanduser(args.api_key_file))

    def status(data: dict[str, Any]) -> None:
        if data.get("status") == "loading" and not args.json:
            print(f"(loading {data.get('model')}...)", file=sys.stderr, flush=True)

    def echo(text: str) -> None:
        if not args.json:
            print(text, end="", flush=True)

    questions = [args.question] if args.question is not None else (line.rstrip("\n") for line in sys.stdin)
    messages: list[dict[str, str]] = []
    figures: list[dict[str, Any] | None] = []
    saved: str | None = None
    with ensure_engine() as client:
        client.timeout = 900.0  # the first request may wait for the model to load
        for question in questions:
            if not question.strip():
                continue
            messages.append({"role": "user", "content": question})
            done = stream_answer(client, ref, messages, settings, echo, status)
            messages.append({"role": "assistant", "content": done["text"]})
            figures.append(answer_figures(done))
            if args.save:  # after every answer, as the Playground does: a broken-off session keeps what it had
                side = {"model": ref, "title": args.model, "messages": messages, "figures": figures}
                saved = client.call("chats.save", sides=[side], settings=settings,
                                    **({"id": saved} if saved else {}))["id"]
            for warning in done.get("warnings") or []:
                print(f"warning: {warning}", file=sys.stderr)
            if args.json:
                print(json.dumps({k: v for k, v in done.items() if k != "request"}))
            else:
                print()
                print(_speed(done), file=sys.stderr, flush=True)
    if saved:
        print(f"saved as {saved} (ember chats show {saved}; the Playground's Saved chats)", file=sys.stderr)
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    with ensure_engine() as client:
        client.timeout = 900.0
        if (args.text is None) == (args.image is None):
            print("error: give a text or --image FILE (one of them)", file=sys.stderr)
            return 2
        given = {"image": os.path.abspath(args.image)} if args.image else {"text": args.text}
        result = client.call("playground.predict", model=model_ref(args.model), **given)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['label']}")
    for name, p in sorted(zip(result["labels"], result["probs"], strict=True), key=lambda x: -x[1]):
        print(f"  {p:7.2%}  {name}")
    return 0


def add_parser(sub: Any) -> None:
    c = sub.add_parser("chat", help="ask a language model (a job, a built-in, a folder or a Hub id) a question")
    c.add_argument("model", help="a finished job's id, smollm2-135m-instruct, a model folder, owner/name[@rev], or "
                                 "an OpenAI-compatible server's URL (http://host:port/v1)")
    c.add_argument("--api-key-file", help="with a URL: a file holding the server's API key")
    c.add_argument("question", nargs="?", help="omit to read one question a line from stdin (one conversation)")
    c.add_argument("--system", help="a system prompt")
    c.add_argument("--template", choices=TEMPLATE_NAMES, default="model", help="chat template (default: the model's)")
    c.add_argument("--temperature", type=float, default=0.7, help="0: greedy")
    c.add_argument("--top-p", type=float, default=0.9)
    c.add_argument("--top-k", type=int, default=50)
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--repetition-penalty", type=float, default=1.0)
    c.add_argument("--stop", action="append", help="text that ends the answer (repeatable)")
    c.add_argument("--seed", type=int, help="the same seed gives the same answer")
    c.add_argument("--json", action="store_true", help="one JSON object per answer: text and speed figures")
    c.add_argument("--save", action="store_true", help="keep the conversation with the Playground's saved chats "
                   "(ember chats)")
    c.set_defaults(fn=cmd_chat)
    p = sub.add_parser("predict", help="a classifier's label and every class's probability for a text or image")
    p.add_argument("model", help="a finished classification job (or variant) id")
    p.add_argument("text", nargs="?", help="the text, for a text classifier")
    p.add_argument("--image", help="an image file, for an image classifier")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_predict)
