"""serve.model: the OpenAI-compatible endpoint, through the official ``openai`` client, against a real engine.

The built-in tiny random Llama answers (fast); greedy answers equal model.generate's for the same prompt. Eight
streaming clients at once all get their answers; a wrong model name or too many tokens is a clear 4xx; Stop ends
the job, closes the port and leaves no process. A classifier answers /v1/classify.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from engine.cli.chat import stream_answer
from tests.conftest import ROOT, alive, wait_for
from tests.engine.test_finetune import events_of, wait_final
from tests.engine.test_playground import QUESTION, direct_greedy

openai = pytest.importorskip("openai")


def start_serving(c, model: dict) -> tuple[str, str]:
    job = c.call("jobs.start", kind="serve.model", spec={"model": model, "port": 0})
    wait_for(lambda: events_of(c, job["id"], "serving") or c.call("jobs.get", id=job["id"])["state"] == "failed",
             timeout=180, what="the server to listen")
    first = events_of(c, job["id"], "serving")
    assert first, c.call("jobs.logs", id=job["id"])["lines"][-30:]
    return job["id"], first[0]["url"]


def stop_serving(c, job_id: str, url: str) -> None:
    pid = c.call("jobs.get", id=job_id)["pid"]
    c.call("jobs.stop", id=job_id)
    assert wait_final(c, job_id, timeout=60)["state"] == "stopped"
    assert not alive(pid)
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass


def test_the_openai_client_chats_streams_completes_and_eight_clients_at_once(engine_proc):
    with engine_proc.client() as c:
        c.timeout = 60
        job_id, url = start_serving(c, {"builtin": "tiny-llama"})
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        assert [m.id for m in client.models.list().data] == ["tiny-llama"]

        # Greedy: what model.generate gives for the same prompt, with the token counts.
        reply = client.chat.completions.create(model="tiny-llama", messages=QUESTION, temperature=0, max_tokens=12)
        expected, n = direct_greedy(QUESTION, 12)
        assert reply.choices[0].message.content == expected and reply.choices[0].finish_reason == "length"
        assert reply.usage.completion_tokens == n == 12 and reply.usage.prompt_tokens > 5

        # Streamed: the deltas join to the same text; the usage comes last when asked for.
        stream = client.chat.completions.create(model="tiny-llama", messages=QUESTION, temperature=0, max_tokens=12,
                                                stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == expected
        assert chunks[-1].usage.completion_tokens == 12 and len(chunks) > 3

        done = client.completions.create(model="tiny-llama", prompt="The capital of France is", max_tokens=5,
                                         temperature=0)
        assert done.usage.completion_tokens == 5 and done.choices[0].text

        with pytest.raises(openai.NotFoundError, match="serves 'tiny-llama'"):
            client.chat.completions.create(model="gpt-4o", messages=QUESTION)
        with pytest.raises(openai.BadRequestError, match="max_tokens"):
            client.chat.completions.create(model="tiny-llama", messages=QUESTION, max_tokens=10**6)
        with pytest.raises(openai.BadRequestError, match="text encoders"):
            client.embeddings.create(model="tiny-llama", input="hello")

        # Eight streaming clients at once: each gets its whole answer; none fails.
        answers: dict[int, str] = {}
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                s = client.chat.completions.create(model="tiny-llama", temperature=0, max_tokens=8,
                                                   messages=[{"role": "user", "content": f"Count to {i}"}], stream=True)
                answers[i] = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not errors and sorted(answers) == list(range(8)) and all(answers.values())

        # The figures the job reports while serving. A request counts when it arrives, so an event written
        # while the last client still waited shows it queued: wait for one written after all had ended.
        def settled() -> bool:
            last = events_of(c, job_id, "serving")[-1]
            return (last.get("requests") or 0) >= 14 and last.get("queue") == 0 and last.get("active") == 0

        wait_for(settled, timeout=30, what="the figures after the last request")
        figures = events_of(c, job_id, "serving")[-1]
        assert figures["requests"] == 14 and figures["errors"] == 3 and figures["tokens"] >= 12 + 12 + 5 + 8 * 1 and figures["queue"] == 0

        # The load test from a terminal: 4 streaming clients for 3 s, no errors.
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        bench = subprocess.run([sys.executable, "-m", "engine.cli", "bench-serve", url, "--clients", "4", "--seconds",
                                "3", "--max-tokens", "4", "--json"], capture_output=True, text=True, env=env,
                               timeout=120)
        result = json.loads(bench.stdout)
        assert bench.returncode == 0 and result["errors"] == 0 and result["requests"] >= 4, bench.stderr
        # Sampled answers (temperature 1): one may end early at the end-of-text token.
        assert 0 < result["tokens"] <= 4 * result["requests"] and result["ttft_p50_s"] > 0

        # The Playground asked for the model this job serves: it chats with the job (no second copy loaded).
        done = stream_answer(c, {"builtin": "tiny-llama"}, QUESTION, {"temperature": 0, "max_new_tokens": 12})
        assert done["text"] == expected and done["new_tokens"] == 12, done
        listed = c.call("playground.workers")["workers"]
        assert [(w["pid"], w["info"]["url"]) for w in listed] == [(None, url)], listed
        stop_serving(c, job_id, url)
        assert c.call("playground.workers")["workers"] == []  # a stopped server's endpoint leaves the list

        # ember serve: the URL once it listens; --detach leaves it serving as a job. Bound to every address, it
        # wants an API key: the job writes one (readable by its owner only) and refuses requests without it.
        out = subprocess.run([sys.executable, "-m", "engine.cli", "serve", "tiny-llama", "--port", "0", "--name",
                              "tiny", "--bind", "0.0.0.0", "--detach"], capture_output=True, text=True, env=env,
                             timeout=180, check=True)
        served = out.stdout.strip()
        assert served.startswith("http://127.0.0.1:") and served.endswith("/v1")
        job = next(j for j in c.call("jobs.list")["jobs"] if j["kind"] == "serve.model" and j["state"] == "running")
        key_file = events_of(c, job["id"], "serving")[0]["api_key_file"]
        assert key_file in out.stderr and oct(os.stat(key_file).st_mode & 0o777) == "0o600"
        key = open(key_file).read().strip()
        assert len(key) >= 32 and key not in json.dumps(c.call("jobs.logs", id=job["id"])) and key not in out.stderr
        for wrong in ("x", key[:-1] + ("A" if key[-1] != "A" else "B")):
            with pytest.raises(openai.AuthenticationError, match="API key"):
                openai.OpenAI(base_url=served, api_key=wrong, max_retries=0).models.list()
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=served, api_key=wrong, max_retries=0).chat.completions.create(
                model="tiny", messages=QUESTION, max_tokens=2)
        assert urllib.request.urlopen(served.removesuffix("/v1") + "/health", timeout=10).status == 200
        assert [m.id for m in openai.OpenAI(base_url=served, api_key=key).models.list().data] == ["tiny"]

        # The Playground (here through `ember chat`) talks to a served endpoint: the engine itself streams from
        # it (no worker process), and the answer is the served model's greedy answer. Without the key file it
        # says what to give.
        chat = [sys.executable, "-m", "engine.cli", "chat", served, QUESTION[0]["content"], "--temperature", "0",
                "--max-new-tokens", "12", "--json"]
        refused = subprocess.run(chat, capture_output=True, text=True, env=env, timeout=120)
        assert refused.returncode != 0 and "API key" in refused.stderr, refused.stderr[-2000:]
        answered = subprocess.run(chat + ["--api-key-file", key_file], capture_output=True, text=True, env=env,
                                  timeout=120)
        assert answered.returncode == 0, answered.stderr[-2000:]
        done = json.loads(answered.stdout.strip().splitlines()[-1])
        assert done["text"] == expected and done["new_tokens"] == 12 and done["ttft_s"] > 0, done
        listed = [w for w in c.call("playground.workers")["workers"] if w["info"].get("url") == served]
        assert [(w["pid"], w["info"]["runtime"]) for w in listed] == [(None, "endpoint")], listed
        # The serve job's tokens/s is that of the answers that ended (tokens over their seconds), never a 0 for
        # an idle server: a report after the answer carries it, the ones before carry None.
        wait_for(lambda: any(e.get("tokens_per_s") for e in events_of(c, job["id"], "serving")), timeout=30,
                 what="a serving report with the answer's tokens/s")
        assert all(e.get("tokens_per_s") is None or e["tokens_per_s"] > 0
                   for e in events_of(c, job["id"], "serving"))
        stop_serving(c, job["id"], served)


def test_a_classifier_answers_its_route_and_a_busy_port_fails_clearly(engine_with_runs):
    eng, ids = engine_with_runs("text")
    with eng.client() as c:
        c.timeout = 60
        job_id, url = start_serving(c, {"run": ids["text"]})
        request = urllib.request.Request(url + "/classify", json.dumps({"input": ["I was charged twice"]}).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            (row,) = json.load(r)["data"]
        assert row["label"] in row["labels"] and abs(sum(row["probs"]) - 1) < 1e-4
        chat = urllib.request.Request(url + "/chat/completions", json.dumps({"messages": QUESTION}).encode())
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(chat, timeout=60)
        assert err.value.code == 400 and "is a classifier" in json.load(err.value)["error"]["message"]

        # Its encoder's embeddings through the openai client: one vector per text, the same text the same vector,
        # a paraphrase nearer than another topic.
        import numpy as np

        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
        texts = ["I was charged twice for my order", "I was billed two times for one purchase",
                 "The app crashes when I open it", "I was charged twice for my order"]
        reply = client.embeddings.create(model=client.models.list().data[0].id, input=texts)
        vectors = np.array([d.embedding for d in reply.data])
        assert vectors.shape[0] == 4 and vectors.shape[1] >= 64 and reply.usage.prompt_tokens > 12
        assert np.allclose(vectors[0], vectors[3], atol=1e-5)
        cos = vectors @ vectors.T / np.outer(np.linalg.norm(vectors, axis=1), np.linalg.norm(vectors, axis=1))
        assert cos[0, 1] > cos[0, 2], cos
        raw = urllib.request.Request(url + "/embeddings", json.dumps({"input": texts[0], "encoding_format": "float"}).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(raw, timeout=60) as r:  # floats as JSON numbers, the same vector
            assert np.allclose(json.load(r)["data"][0]["embedding"], vectors[0], atol=1e-5)

        # A second server on the same port: the job fails with the reason and what to do.
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        other = c.call("jobs.start", kind="serve.model", spec={"model": {"run": ids["text"]}, "port": port})
        failed = wait_final(c, other["id"], timeout=180)
        assert failed["state"] == "failed" and f"Cannot listen on 127.0.0.1:{port}" in failed["error"]["message"]
        assert "pick another port" in failed["error"]["hint"]
        stop_serving(c, job_id, url)


def test_api_keys_and_endpoints_in_specs_say_what_is_wrong(tmp_path):
    from engine.api.specs import validate_spec
    from engine.recipes.serve import api_key
    from engine.training.context import JobFailed

    tiny = {"builtin": "tiny-llama"}
    assert api_key(validate_spec("serve.model", {"model": tiny}), tmp_path) == (None, None)  # loopback: no key
    key, path = api_key(validate_spec("serve.model", {"model": tiny, "bind": "0.0.0.0"}), tmp_path)
    assert path == str(tmp_path / "api_key") and open(path).read().strip() == key and len(key) >= 32
    short = tmp_path / "short.key"
    short.write_text("abc\n")
    for given, message in ((tmp_path / "none.key", "Cannot read the API key file"), (short, "3 characters")):
        with pytest.raises(JobFailed, match=message):
            api_key(validate_spec("serve.model", {"model": tiny, "api_key_file": str(given)}), tmp_path)
    for kind, spec in (("serve.model", {"model": {"url": "http://127.0.0.1:9/v1"}}),
                       ("export.model", {"model": {"url": "http://127.0.0.1:9/v1"}, "formats": ["hf"]}),
                       ("evaluate.model", {"model": {"url": "http://127.0.0.1:9/v1"}})):
        with pytest.raises(Exception, match="chatted with only"):
            validate_spec(kind, spec)
    with pytest.raises(Exception, match="bind"):
        validate_spec("serve.model", {"model": {"path": "/m"}, "host": "gpu1", "bind": "0.0.0.0"})
    with pytest.raises(Exception, match="api_key_file goes with url"):
        validate_spec("serve.model", {"model": {"builtin": "tiny-llama", "api_key_file": "/k"}})


FAKE_VLLM = ROOT / "tests" / "fixtures" / "fake_vllm"


def test_the_vllm_backend_starts_vllms_server_and_reports_its_figures(engine_proc, tmp_path):
    """backend: vllm runs `python -m vllm.entrypoints.openai.api_server` with the model folder, tensor parallel
    size and API key; here that Python finds tests/fixtures/fake_vllm, a STAND-IN for vLLM (no CUDA GPU here)
    that serves with Ember's server on the CPU and answers /metrics in vLLM's names. The job's own code path
    (start, readiness, figures from /metrics, the key kept out of logs, Stop) is the real one."""
    python = tmp_path / "vllm-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{FAKE_VLLM}:{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'FAKE_VLLM_PORT_TAKEN_ONCE=1 exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    with engine_proc.client() as c:
        c.timeout = 60
        refused = c.call("jobs.start", kind="serve.model", spec={"model": {"builtin": "tiny-llama"}, "port": 0,
                                                                 "backend": "vllm"})
        failed = wait_final(c, refused["id"], timeout=120)
        assert failed["state"] == "failed" and "vLLM is not installed" in failed["error"]["message"], failed
        assert "vllm_python" in failed["error"]["hint"]

        spec = {"model": {"builtin": "tiny-llama"}, "port": 0, "backend": "vllm", "tensor_parallel": 2,
                "vllm_python": str(python), "bind": "0.0.0.0"}
        job = c.call("jobs.start", kind="serve.model", spec=spec)
        wait_for(lambda: events_of(c, job["id"], "serving") or c.call("jobs.get", id=job["id"])["state"] == "failed",
                 timeout=180, what="vLLM to answer")
        first = events_of(c, job["id"], "serving")
        assert first, (c.call("jobs.get", id=job["id"]).get("error"), c.call("jobs.logs", id=job["id"])["lines"][-30:])
        first = first[0]
        assert first["runtime"] == "vllm" and first["tensor_parallel"] == 2 and first["url"].startswith("http://127.0.0.1:")
        run_dir = Path(c.call("jobs.get", id=job["id"])["run_dir"])
        args = json.loads((run_dir / "vllm-args.json").read_text())
        assert args["tensor_parallel_size"] == 2 and args["served_model_name"] == "tiny-llama" and args["api_key"]
        assert args["model"].endswith("tiny-llama") or (Path(args["model"]) / "config.json").is_file()
        key = open(first["api_key_file"]).read().strip()
        logs = "\n".join(c.call("jobs.logs", id=job["id"], tail=200)["lines"])
        assert "--tensor-parallel-size 2" in logs and "--api-key ***" in logs and key not in logs
        # The stand-in found its picked port taken once (FAKE_VLLM_PORT_TAKEN_ONCE): the job picked another.
        assert "was taken before vLLM bound it; picking another" in logs and logs.count("starting vLLM") == 2

        client = openai.OpenAI(base_url=first["url"], api_key=key, max_retries=0, timeout=120)
        reply = client.chat.completions.create(model="tiny-llama", messages=QUESTION, temperature=0, max_tokens=12)
        expected, _n = direct_greedy(QUESTION, 12)
        assert reply.choices[0].message.content == expected
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=first["url"], api_key="wrong", max_retries=0).models.list()
        wait_for(lambda: (events_of(c, job["id"], "serving")[-1].get("tokens") or 0) >= 12, timeout=30,
                 what="vLLM's figures")
        figures = events_of(c, job["id"], "serving")[-1]
        assert figures["requests"] >= 1 and figures["queue"] == 0 and figures["ttft_p50_s"] is not None
        stop_serving(c, job["id"], first["url"])
        assert "stand-in for vLLM: shut down" in (run_dir / "vllm.log").read_text()

        # A job killed outright (SIGKILL: no Stop, no cleanup) takes vLLM with it: nothing keeps the GPUs.
        job = c.call("jobs.start", kind="serve.model", spec={**spec, "bind": "127.0.0.1"})
        wait_for(lambda: events_of(c, job["id"], "serving"), timeout=180, what="vLLM to answer again")
        url = events_of(c, job["id"], "serving")[0]["url"]
        pid = c.call("jobs.get", id=job["id"])["pid"]
        children = psutil.Process(pid).children()
        assert children and "vllm.entrypoints.openai.api_server" in " ".join(children[0].cmdline())
        os.kill(pid, signal.SIGKILL)
        psutil.wait_procs(children, timeout=30)
        assert not any(ch.is_running() and ch.status() != psutil.STATUS_ZOMBIE for ch in children)
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
            pass


# ---------------------------------------------------------------- the HTTP server's limits, in this process
# Service over no model: /v1/models, /health and a POST to the wrong kind's route (a 400 once the body is read)
# exercise the server without generating anything.

KEY = "k" * 32


@contextlib.contextmanager
def serving(api_key: str | None = None, **limits):
    from engine.serve.http_server import Limits
    from engine.serve.openai_api import Service, server

    httpd = server(Service("chat", None, "tiny", 16, api_key), "127.0.0.1", 0, Limits(**limits))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def raw_request(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(data)
    return sock


def read_to_close(sock: socket.socket) -> bytes:
    """Everything until the server closes (socket.timeout if it never does)."""
    out = b""
    with sock:
        while chunk := sock.recv(65536):
            out += chunk
    return out


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


MODELS = b"GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def test_two_hundred_clients_at_once_are_all_answered():
    with serving(workers=8) as httpd:  # fewer workers than clients: the rest wait in the queue, none is reset
        port = httpd.server_address[1]
        socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(200)]
        for s in socks:
            s.sendall(MODELS)
        answers = [read_to_close(s) for s in socks]
        assert [status_of(a) for a in answers] == [200] * 200
        assert all(json.loads(a.split(b"\r\n\r\n", 1)[1])["data"][0]["id"] == "tiny" for a in answers)

        # Keep-alive: two requests on one connection, the second after the first's answer.
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(2):
            conn.request("POST", "/v1/classify", body=json.dumps({"input": "hi"}))
            reply = conn.getresponse()
            assert reply.status == 400 and "is a language model" in json.load(reply)["error"]["message"]
        conn.close()
        wait_for(lambda: httpd.open_count == 0, timeout=10, what="every connection closed and counted out")


def test_half_sent_requests_are_closed_after_the_timeout_while_others_are_answered():
    with serving(workers=8, header_timeout=1, body_timeout=1) as httpd:
        port = httpd.server_address[1]
        # 100 heads never finished (they hold no worker) and 4 bodies shorter than their Content-Length (each
        # holds a worker until the body timeout).
        heads = [raw_request(port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n")
                 for _ in range(100)]
        bodies = [raw_request(port, b"POST /v1/classify HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{\"in")
                  for _ in range(4)]
        assert status_of(read_to_close(raw_request(port, MODELS))) == 200
        post = b'{"input": "hello"}'
        answered = read_to_close(raw_request(port, b"POST /v1/classify HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                                                   b"Content-Length: %d\r\n\r\n%s" % (len(post), post)))
        assert status_of(answered) == 400 and b"is a language model" in answered
        # Each half-sent one is answered 408 and closed (recv returns b"" rather than timing out).
        closed_heads = [read_to_close(s) for s in heads]
        assert all(status_of(a) == 408 and b"head did not arrive" in a for a in closed_heads)
        closed_bodies = [read_to_close(s) for s in bodies]
        assert all(status_of(a) == 408 and b"body did not arrive" in a for a in closed_bodies)
        wait_for(lambda: httpd.open_count == 0, timeout=10, what="every connection closed and counted out")


def test_a_request_without_the_key_is_refused_before_its_body_is_read():
    with serving(api_key=KEY, body_timeout=60) as httpd:
        port = httpd.server_address[1]
        # No body follows: had the server waited for it, recv would time out (30 s) long before its 60 s.
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n"
        refused = read_to_close(raw_request(port, head + b"\r\n"))
        assert status_of(refused) == 401 and b"Connection: close" in refused
        assert json.loads(refused.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "invalid_api_key"
        # Expect: 100-continue: without the key no "100 Continue" (the client never sends its body); with it,
        # the server asks for the body.
        refused = read_to_close(raw_request(port, head + b"Expect: 100-continue\r\n\r\n"))
        assert status_of(refused) == 401 and b"100 Continue" not in refused
        keyed = raw_request(port, head.replace(b"1000000", b"2") + b"Authorization: Bearer " + KEY.encode() +
                            b"\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
        assert keyed.recv(100).startswith(b"HTTP/1.1 100 Continue")
        keyed.sendall(b"{}")
        assert status_of(read_to_close(keyed).split(b"\r\n\r\n", 1)[0]) == 400  # no messages; the body was read
        # Too large: 413 from its Content-Length alone.
        big = read_to_close(raw_request(port, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                                        KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % (9 << 20)))
        assert status_of(big) == 413 and b"request_too_large" in big


def test_a_client_address_past_its_connection_cap_gets_429():
    with serving(per_client=3, cap_loopback=True) as httpd:
        port = httpd.server_address[1]
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
        wait_for(lambda: httpd.open_count == 3, timeout=10, what="the three connections counted")
        over = read_to_close(raw_request(port, MODELS))
        error = json.loads(over.split(b"\r\n\r\n", 1)[1])["error"]
        assert status_of(over) == 429 and b"Retry-After: 1" in over
        assert error["code"] == "rate_limit_exceeded" and "more than 3 connections" in error["message"]
        for s in held:
            s.close()
        wait_for(lambda: httpd.open_count == 0, timeout=10, what="the held connections closed")
        assert status_of(read_to_close(raw_request(port, MODELS))) == 200
    with serving(per_client=3) as httpd:  # loopback clients are not capped by default
        port = httpd.server_address[1]
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(5)]
        assert status_of(read_to_close(raw_request(port, MODELS))) == 200
        for s in held:
            s.close()


def test_a_busy_port_fails_to_bind_with_the_os_error():
    from engine.serve.openai_api import Service, server

    with serving() as httpd, pytest.raises(OSError):
        server(Service("chat", None, "tiny", 16), "127.0.0.1", httpd.server_address[1])
