"""The engine's wire protocol: JSON-RPC 2.0, one UTF-8 JSON request (or batch array) per line.

Written down for people in docs/protocol.md. Stdlib only: the GUI, the CLI,
tests and third-party scripts all import this module.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

PROTOCOL_VERSION = 2  # 2: saved chats are chats.* (were conversations.*)
RequestId = int | float | str | None
MAX_FRAME_BYTES = 1024 * 1024  # one line, newline included
# Deeper frames are parse errors: json.loads recurses once per level (a 2 KB frame of brackets raised
# RecursionError), and so would every handler, validator and encoder that walks the value afterwards.
MAX_DEPTH = 64

# JSON-RPC 2.0 reserved codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# The messages the specification gives its codes (section 5.1). On the wire an error with one of these
# codes carries exactly that message; Ember's own sentence travels in data.detail (see RpcError.to_json).
STANDARD_MESSAGES = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
}
# Ember's own codes (the implementation-defined server-error range).
UNAUTHORIZED = -32001
HANDSHAKE_REQUIRED = -32002
FRAME_TOO_LARGE = -32003
NOT_FOUND = -32004
INVALID_STATE = -32005
UNSUPPORTED_VERSION = -32006
SHUTTING_DOWN = -32007
REMOTE_FAILED = -32008  # a host could not be reached, logged in to, or did not do what was asked
CONFIRMATION_REQUIRED = -32009  # model.code needs the user's confirmation: data {path, sha256, size, preview}
POLICY_REFUSED = -32010  # the data policy refused a job's data: data {path, folder, rule, sha256, scan, hint}
FORBIDDEN = -32011  # the user's role may not do this (engine/api/permissions.py): data {role, needs, hint}

# Every method the engine answers, with one line each; `engine.methods` returns this.
METHODS: dict[str, str] = {
    "hello": "First request of every connection: {token, protocol, client} -> server facts.",
    "ping": "Liveness check -> {t}.",
    "engine.status": "Version, pid, uptime, paths and job counts.",
    "engine.methods": "This table.",
    "engine.shutdown": "Stop the engine (running jobs keep running and are re-attached on restart).",
    "jobs.kinds": "Job kinds this engine can run, with their spec schemas.",
    "jobs.start": "{kind, spec, name?} -> the new job (queued or running).",
    "jobs.check": "{kind, spec} -> {issues: [{message, hint, file, line}]}: the spec and its input files, before launch.",
    "data.preview": "{spec, n?} -> {samples: [{label, png_base64}], issues}: augmented training images of an image spec.",
    "data.inspect": "{spec, n?} -> {kind, columns, rows, thumbnails, class_counts, n_train, n_val, issues, "
                    "file_columns?, column_guess?, model_chat_template?, chat_template_used?, "
                    "rendered_example?, hub?}: what the wizard shows of a dataset.",
    "users.me": "-> {name, role, projects}: who this connection is (docs/security.md).",
    "users.list": "-> {users: [{name, role, projects, created_at, expires_at, revoked_at}]}: the engine's users (never "
                  "their tokens).",
    "users.add": "{name, role, projects?, expires_days?} -> {user, token}: a new user; the token is shown this once.",
    "users.update": "{name, role?, projects?, expires_days?, new_token?} -> {user, token?}: change a user; with "
                    "new_token a fresh token replaces the old one (shown this once).",
    "users.revoke": "{name} -> {user}: the user's token stops working at once (connections using it are closed).",
    "projects.list": "-> {projects: [{name, data_folders, hosts, members}]}: the projects this user belongs to.",
    "projects.set": "{name, data_folders?, hosts?, remove?} -> {name, data_folders, hosts}: a project's data folders "
                    "and hosts, which only its jobs (and members) may use.",
    "secrets.list": "{project?} -> {secrets: {project: [name]}}: the names (never the values) of the secrets an admin "
                    "keeps for this user's projects; a Playground endpoint's key is named by api_key_secret.",
    "secrets.set": "{project, name, secret?, remove?} -> {project, name, removed}: keep (or remove) a project's "
                   "secret, e.g. an endpoint's API key (admins).",
    "pii.policy": "-> {rules: [{folder or project, max_findings}]}: the data policy (which folders' files, or which "
                  "projects' data, must be scanned for personal data, or scrubbed, before a fine-tune trains on them).",
    "pii.set_policy": "{folder or project, max_findings?, clear?} -> {rules}: set (or with clear, remove) the rule of a "
                      "folder ('/' for every file) or a project; max_findings null = a scan is enough.",
    "models.inspect": "{spec} -> {ok, issues, facts}: the spec's model, measured on the meta device (no weights loaded).",
    "estimate.fit": "{spec} -> {devices, verdict, reason, suggestions, params, throughput, notes}: "
                    "peak memory per device before launch.",
    "estimate.plan": "{spec, gpus?, gpu_memory_gb?, gpus_per_node?} -> {plans: [{layout, spec_patch, "
                     "memory_per_gpu, capacity, verdict, throughput, recommended?}], fitting, considered, notes}: "
                     "the parallel layouts that fit those GPUs (default: this machine's), fastest first.",
    "machine.info": "{} -> {hostname, cpu, ram, gpus, disk_free}: this machine's capacity.",
    "templates.list": "{} -> {templates: [{name, kind, spec, saved_at}]}.",
    "templates.save": "{name, kind, spec} -> {name}: keep a spec to start new jobs from.",
    "templates.delete": "{name} -> {ok}.",
    "hosts.list": "{} -> {hosts: [host]}: remote host profiles with their key status and last probe.",
    "hosts.add": "{host} -> host: a new host profile (name, address, port, user, auth, key_path, python, workdir, role).",
    "hosts.update": "{name, host} -> host: change a profile (refused while a run uses it).",
    "hosts.remove": "{name} -> {ok}: forget a host (refused while a run uses it).",
    "hosts.check_key": "{name} -> {status: trusted|unknown|changed, fingerprint, key_type, known_fingerprints}.",
    "hosts.trust": "{name, fingerprint} -> {status, fingerprint}: trust the key the host presents, if it has "
                   "that fingerprint.",
    "hosts.forget_key": "{name} -> {ok, removed}: remove the host's trusted keys (after a legitimate key change).",
    "hosts.probe": "{name, password?} -> host with fresh facts (OS, CPU, RAM, disk, GPUs, CUDA, Python, "
                   "packages, Jetson).",
    "hosts.prepare": "{name, password?} -> host: install this Ember version into the host's Python from a "
                     "copied wheel; progress on topic hosts/<name>.",
    "hosts.slurm": "{name} -> {cluster, partitions: [{name, default, up, nodes, idle_nodes, cpus_per_node, "
                   "memory_mb_per_node, gpus_per_node, max_minutes}], version, user}: the Slurm cluster whose login "
                   "node is that host ('local': this machine), from sinfo.",
    "jobs.list": "{state?, kind?, limit?} -> jobs, newest first.",
    "jobs.get": "{id} -> one job, with its result when it has one (a sweep: its trials too, `sweep`).",
    "jobs.stop": "{id} -> ask the job to stop gracefully (SIGTERM to its process group).",
    "jobs.cancel": "{id} -> stop the job at once (SIGKILL to its process group).",
    "jobs.resume": "{id} -> queue a stopped or failed resumable job again; it continues from its checkpoint.",
    "jobs.delete": "{id, files?} -> {ok, freed_bytes}: forget a finished job, and delete its run dir unless files=false.",
    "jobs.artifacts": "{id} -> {checkpoints, artifacts, parent, children, memory}: what a run produced and its lineage.",
    "compress.variants": "{id} -> {parent, parent_evaluation, parent_deployments, variants: [{job, evaluation, "
                         "deployments}]}: a run's compressed variants, each scored beside it (evaluation.json); "
                         "deployments: the export jobs of each, with their on-device figures.",
    "evaluations.list": "{id} -> {id, root, task, rows: [{role: base|run|variant, label, model, job, evaluations: "
                        "[{job, state, data_key, data_label, rows, metrics, lm_eval: [{task, metric, filter, value, "
                        "stderr, docs}]}]}]}: the evaluate.model results of a run, its variants and its base model.",
    "jobs.metrics": "{id, kind?} -> the run's numeric metrics, one row per (kind, name, step).",
    "jobs.logs": "{id, tail?} -> the last lines of the job's stdout.log.",
    "subscribe": "{topics: [glob], since?: seq} -> replay stored events after `since`, then live.",
    "unsubscribe": "{subscription} -> stop a subscription.",
    "events.query": "{topics: [glob], since?, limit?} -> stored events, without subscribing.",
    "audit.list": "{limit?, offset?, action?, client?, target?, since?, until?, ok?, text?} -> "
                  "{records, total, offset, next_offset}: audit records, newest first.",
    "jobs.lineage": "{id} -> the job's lineage: spec, data and model hashes, code and package versions, "
                    "parent runs, artifacts.",
    "runs.lineage": "{id} -> jobs.lineage's reply (its older name, kept for older clients).",
    "diag.burst": "{topic, count, payload_bytes?} -> publish synthetic events (benchmarks, tests).",
    "playground.chat": "{model, messages, settings?} -> {request, topic, since, model}: start an answer; it "
                       "streams on topic playground/<request> as {status}, {text} chunks, then {done, stats} or "
                       "{error, hint} (docs/playground.md).",
    "playground.stop": "{request} -> {ok}: end an answer early (its done event says stopped: user).",
    "playground.predict": "{model, text | image} -> {label, labels, probs, seconds, model}: a classifier's "
                          "probabilities for a text, or an image file.",
    "playground.workers": "{} -> {workers: [{model, label, pid, state, kind, rss, busy, idle_s, info}]}: the "
                          "loaded models.",
    "playground.unload": "{model} -> {ok}: stop a model's worker and free its memory.",
    "chats.save": "{id?, title?, sides: [{model, title?, messages, figures?}] (1 or 2), settings?} -> {id, "
                          "title, updated_at}: keep a Playground chat (a new one without id, else replace it).",
    "chats.list": "{limit?, offset?} -> {chats: [{id, title, created_at, updated_at, models, "
                          "questions}], total}: saved chats, newest first.",
    "chats.get": "{id} -> {id, title, created_at, updated_at, models, questions, conversation}: one saved "
                         "chat, whole.",
    "chats.delete": "{id} -> {ok}: forget a saved chat.",
    "queue.get": "{} -> {jobs: [queued jobs in run order, each with its wait reason], running, resources, settings}.",
    "queue.move": "{id, to: top|up|down|bottom} -> queue.get's reply: reorder a queued job.",
    "queue.configure": "{max_concurrent?, cpu_cores?, allow_gpu_sharing?} -> queue.get's reply; kept across restarts.",
    "jobs.prioritize": "{id, priority} -> queue.get's reply: a queued job's priority (higher runs first).",
    "models.list": "{} -> {models: [{repo_id, revisions: [{commit, refs, size_bytes, files, path}], size_bytes, "
                   "last_used, last_modified, path, partial_bytes}], cache_dir}: the models in the Hugging Face cache.",
    "models.delete": "{repo_id, revision?} -> {ok, freed_bytes}: delete a cached model, or one revision of it "
                     "(refused while a job downloads or fine-tunes it).",
    "models.search": "{text, limit?} -> {models: [{repo_id, downloads, likes, license, gated, size_bytes, "
                     "pipeline_tag, library, cached}], endpoint}: search the Hugging Face Hub; offline, an error "
                     "within seconds.",
    "hub.status": "{} -> {endpoint, offline, cache_dir, token: {set, source, path}}: never the token itself.",
    "hub.login": "{token} -> hub.status's reply: save a Hugging Face access token where huggingface_hub reads it "
                 "(HF_HOME/token, mode 0600); audited with the token masked.",
    "hub.logout": "{} -> hub.status's reply: delete the saved token file.",
}


class RpcError(Exception):
    """An error reply. ``data`` carries details (fields) and a plain-language ``hint``."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data or {}

    def to_json(self) -> dict[str, Any]:
        standard = STANDARD_MESSAGES.get(self.code)
        if standard is None or self.message == standard:
            err: dict[str, Any] = {"code": self.code, "message": self.message}
            data = self.data
        else:  # the specification's message, and Ember's more precise one beside it
            err = {"code": self.code, "message": standard}
            data = {"detail": self.message, **self.data}
        if data:
            err["data"] = data
        return err

    @classmethod
    def from_json(cls, err: dict[str, Any]) -> RpcError:
        code = int(err.get("code", INTERNAL_ERROR))
        message = str(err.get("message", ""))
        data = err.get("data")
        if isinstance(data, dict) and "detail" in data and message == STANDARD_MESSAGES.get(code):
            data = dict(data)
            message = str(data.pop("detail"))  # what to_json moved aside: users read Ember's sentence
        return cls(code, message, data if isinstance(data, dict) else None)

    @property
    def hint(self) -> str:
        return str(self.data.get("hint", ""))

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


def dumps(obj: Any) -> str:
    """Strict JSON text, compact: non-finite floats become null (JSON has no NaN or Infinity).

    The common case costs one json.dumps; only a value that holds a non-finite float is copied.
    """
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        if "JSON compliant" not in str(exc):  # "Out of range float values are not JSON compliant"
            raise
        return json.dumps(_finite(obj), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_SURROGATE = re.compile("[\ud800-\udfff]")
# An escape \uD800-\uDFFF in JSON text: the only way a lone surrogate gets into decoded valid UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def safe_text(text: str) -> str:
    """``text`` without lone surrogates (they cannot be written as UTF-8): each becomes U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def encode(obj: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    """One frame: a message, or a batch's replies as one array. Always strict JSON in valid UTF-8."""
    text = dumps(obj)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate from somewhere (a file name, a job's output)
        return safe_text(text).encode() + b"\n"


def strict_json_text(text: str) -> str:
    """``text`` (one JSON value, e.g. an event a job wrote) as strict JSON: unchanged unless it may hold
    NaN, Infinity or a lone surrogate, which are then replaced. A cheap scan keeps the common case fast."""
    if "NaN" not in text and "Infinity" not in text and not _SURROGATE_ESCAPE.search(text) \
            and not _SURROGATE.search(text):
        return text
    try:
        return safe_text(dumps(json.loads(text)))
    except (ValueError, RecursionError):
        return safe_text(text)  # not JSON at all: the caller's business (the follower skips such lines)


def _finite(value: Any) -> Any:
    """A copy of ``value`` with every non-finite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, float) and not math.isfinite(k) else k): _finite(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def request(req_id: int | str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


# Replies put "id" last, in the specification's own order, so its examples (section 7) match byte for byte.
def result(req_id: RequestId, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": value, "id": req_id}


def error(req_id: RequestId, err: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": err.to_json(), "id": req_id}


def topic_matches(topic: str, patterns: Iterable[str]) -> bool:
    """Whether ``topic`` matches one of a subscription's globs (``*``, ``?``, ``[...]``, case-sensitive).

    The one rule for live events, used by the engine's event bus and the GUI's client alike.
    """
    return any(fnmatchcase(topic, p) for p in patterns)


def event(topic: str, seq: int, t: float, data: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "event", "params": {"topic": topic, "seq": seq, "t": t, "data": data}}


DECODE_HINT = "Send one UTF-8 JSON object per line (or a JSON array of them: a batch)."


def decode(line: bytes) -> Any:
    """Parse one frame; raises RpcError(PARSE_ERROR) with a hint on bad input.

    Only strict JSON in valid Unicode is read: no NaN or Infinity, no lone surrogates (escaped or not),
    nothing nested deeper than MAX_DEPTH. Whatever a client sends, this raises RpcError or returns.
    """
    if len(line) > MAX_FRAME_BYTES:
        raise RpcError(FRAME_TOO_LARGE, f"Frame of {len(line)} bytes is over the {MAX_FRAME_BYTES}-byte limit",
                       {"hint": "Split the request; large payloads belong in files referenced by path."})
    try:
        text = line.decode("utf-8")  # strictly: json.loads would also guess UTF-16 and UTF-32
        msg = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise _parse_error(f"Nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _parse_error(f"Not valid JSON: {exc}") from None
    # Both walks are skipped unless the text could hold what they look for: a frame with at most
    # MAX_DEPTH brackets cannot be deeper, and a lone surrogate can only come from an escape.
    deep = line.count(b"[") + line.count(b"{") > MAX_DEPTH
    if deep or _SURROGATE_ESCAPE.search(text):
        problem = _check_value(msg)
        if problem:
            raise _parse_error(problem)
    return msg


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_error(detail: str) -> RpcError:
    return RpcError(PARSE_ERROR, detail, {"hint": DECODE_HINT})


def _check_value(msg: Any) -> str:
    """Why a decoded frame is refused ('' when it is not): too deep, or a string with a lone surrogate."""
    stack = [(msg, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return "A string holds a lone surrogate (\\uD800-\\uDFFF), which is not Unicode text"
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return f"Nested deeper than {MAX_DEPTH} levels"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)
    return ""


def valid_id(value: Any) -> bool:
    """A string, a number or null (section 4); JSON's true and false are not numbers.

    A number must be finite (1e400 reads as infinity, which JSON cannot write back) and a string must be
    Unicode text (no lone surrogate), or the reply that echoes it could not be written.
    """
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return not _SURROGATE.search(value)
    return isinstance(value, int)


def request_id(msg: Any) -> RequestId:
    """The id to answer ``msg`` with: its own when it has a valid one, else null (section 5)."""
    req_id = msg.get("id") if isinstance(msg, dict) else None
    return req_id if valid_id(req_id) else None


def is_notification(msg: Any) -> bool:
    """A request object without an "id" member (section 4.1): it is never answered."""
    return isinstance(msg, dict) and "id" not in msg


REQUEST_HINT = 'Send {"jsonrpc":"2.0","id":1,"method":"ping"}: params optional, no id for a notification.'


def parse_request(msg: Any) -> tuple[RequestId, str, dict[str, Any] | list[Any]]:
    """Validate one decoded request object; returns (id, method, params).

    params is an object (named) or an array (by position), {} when absent. Whether a method
    takes what it was given is the method's business (INVALID_PARAMS), not the request's.
    """
    if not isinstance(msg, dict):
        raise RpcError(INVALID_REQUEST, "A request must be a JSON object", {"hint": REQUEST_HINT})
    req_id = msg.get("id")
    if not valid_id(req_id):
        raise RpcError(INVALID_REQUEST, "'id' must be a string, a finite number or null", {"hint": REQUEST_HINT})
    if msg.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, "'jsonrpc' must be \"2.0\"", {"id": req_id, "hint": REQUEST_HINT})
    method = msg.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, "'method' must be a non-empty string", {"id": req_id, "hint": REQUEST_HINT})
    params = msg.get("params", {})
    if params is None:
        params = {}  # the specification says omit it; null is still read as "no params", as Ember always did
    if not isinstance(params, (dict, list)):
        raise RpcError(INVALID_REQUEST, "'params' must be an object or an array", {"id": req_id, "hint": REQUEST_HINT})
    return req_id, method, params
