"""The Playground through the real engine: inference workers, streamed answers, stop, crashes, classifiers.

The chat tests use the built-in tiny random Llama (fast); what they check is the plumbing: the streamed text
is exactly what model.generate gives for the same prompt and settings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from engine.api.protocol import RpcError
from engine.cli.chat import model_ref, stream_answer
from engine.daemon.inference import memory_needed, memory_problem
from tests.conftest import ROOT, wait_for

TINY = {"builtin": "tiny-llama"}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def direct_greedy(question: list[dict[str, str]], max_new_tokens: int) -> tuple[str, int]:
    """The same model, prompt and greedy settings through model.generate, in this process."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.tasks.causal_lm import ensure_tiny_llama
    from engine.tasks.chat_templates import render_prompt

    folder = ensure_tiny_llama()
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = tok(render_prompt(tok, question), add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tok.pad_token_id)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True), int(out.shape[1] - ids.shape[1])


def test_a_streamed_answer_is_what_generate_gives_and_the_worker_stays_warm(engine_proc):
    with engine_proc.client() as c:
        c.timeout = 120
        chunks: list[str] = []
        statuses: list[dict] = []
        done = stream_answer(c, TINY, QUESTION, {"temperature": 0, "max_new_tokens": 24}, chunks.append,
                             statuses.append)
        expected, n = direct_greedy(QUESTION, 24)
        assert done["text"] == "".join(chunks) == expected
        assert done["new_tokens"] == n and done["prompt_tokens"] > 5
        assert done["ttft_s"] > 0 and done["tokens_per_s"] > 0 and done["stopped"] in ("length", "eos")
        assert statuses and statuses[0]["status"] == "loading"
        (worker,) = c.call("playground.workers")["workers"]
        assert (worker["label"], worker["state"], worker["kind"]) == ("tiny-llama", "ready", "chat")
        assert worker["rss"] > 50 * 2**20
        statuses.clear()
        again = stream_answer(c, TINY, QUESTION, {"temperature": 0, "max_new_tokens": 24}, on_status=statuses.append)
        assert again["text"] == expected and not statuses  # warm: no loading the second time
        assert c.call("playground.workers")["workers"][0]["pid"] == worker["pid"]
        assert c.call("playground.unload", model=TINY) == {"ok": True}
        assert c.call("playground.workers")["workers"] == []
        wait_for(lambda: not _alive(worker["pid"]), 10, what="the worker to exit")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def _first_text(c, start: dict) -> None:
    c.subscribe([start["topic"]], since=start["since"])
    wait_for(lambda: any("text" in (e.get("data") or {}) for e in [c.next_event(5) or {}]), 60,
             what="the first chunk")


def test_stop_ends_an_answer_early_and_a_killed_worker_is_reported_then_restarted(engine_proc):
    long = {"temperature": 1.0, "seed": 1, "max_new_tokens": 1900}
    with engine_proc.client() as c:
        c.timeout = 120
        start = c.call("playground.chat", model=TINY, messages=QUESTION, settings=long)
        _first_text(c, start)
        assert c.call("playground.stop", request=start["request"]) == {"ok": True}
        done = wait_for(lambda: next((e["data"] for e in [c.next_event(5) or {}] if (e.get("data") or {}).get("done")),
                                     None), 60, what="the done event")
        assert done["stopped"] == "user" and 0 < done["new_tokens"] < 1900

        (worker,) = c.call("playground.workers")["workers"]
        start = c.call("playground.chat", model=TINY, messages=QUESTION, settings=long)
        _first_text(c, start)
        os.kill(worker["pid"], signal.SIGKILL)
        error = wait_for(lambda: next((e["data"] for e in [c.next_event(5) or {}] if "error" in (e.get("data") or {})),
                                      None), 60, what="the error event")
        assert "stopped unexpectedly (signal 9)" in error["error"] and "starts it again" in error["hint"]
        assert c.call("playground.workers")["workers"] == []
        done = stream_answer(c, TINY, QUESTION, {"temperature": 0, "max_new_tokens": 8})
        assert done["new_tokens"] == 8
        assert c.call("playground.workers")["workers"][0]["pid"] != worker["pid"]


def test_bad_models_get_a_message_and_a_hint(engine_proc, tmp_path):
    with engine_proc.client() as c:
        c.timeout = 120
        with pytest.raises(RpcError) as err:
            stream_answer(c, {"path": str(tmp_path / "nowhere")}, QUESTION, {"max_new_tokens": 4})
        assert "model folder not found" in err.value.message and "config.json" in err.value.hint
        with pytest.raises(RpcError) as err:
            c.call("playground.chat", model={"run": "no-such-job"}, messages=QUESTION)
        assert "has no finished model" in err.value.message and "Runs page" in err.value.hint
        with pytest.raises(RpcError) as err:
            c.call("playground.chat", model={"builtin": "tiny-llama", "path": "/x"}, messages=QUESTION)
        assert "name exactly one model" in json.dumps(err.value.data)
        with pytest.raises(RpcError) as err:
            c.call("playground.chat", model=TINY, messages=QUESTION, settings={"temperature": -1})
        assert err.value.data["fields"][0]["field"] == "settings.temperature"
        assert c.call("playground.workers")["workers"] == []  # a failed load leaves no worker behind


def test_a_text_classifier_gives_every_class_probability_and_refuses_to_chat(engine_with_runs):
    eng, ids = engine_with_runs("text")
    with eng.client() as c:
        c.timeout = 180
        result = c.call("playground.predict", model={"run": ids["text"]}, text="I was charged twice this month")
        assert result["kind"] == "classify" and len(result["labels"]) == len(result["probs"]) >= 2
        assert abs(sum(result["probs"]) - 1) < 1e-5 and result["label"] in result["labels"]
        assert result["probs"][result["labels"].index(result["label"])] == max(result["probs"])
        with pytest.raises(RpcError) as err:
            stream_answer(c, {"run": ids["text"]}, QUESTION, {"max_new_tokens": 4})
        assert "is a classifier" in err.value.message


def test_ember_chat_prints_the_answer_and_its_speed(engine_proc):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "engine.cli", "chat", "tiny-llama", "What is the capital of France?",
                          "--temperature", "0", "--max-new-tokens", "12", "--json"],
                         capture_output=True, text=True, env=env, timeout=180, check=True)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["text"] == direct_greedy(QUESTION, 12)[0] and doc["new_tokens"] == 12
    plain = subprocess.run([sys.executable, "-m", "engine.cli", "chat", "tiny-llama", "--max-new-tokens", "5",
                            "--save", "--system", "Be brief."], input="Hi\nAnd then?\n",
                           capture_output=True, text=True, env=env, timeout=180, check=True)
    assert plain.stderr.count("5 tokens in") == 2 and "tokens/s" in plain.stderr
    saved = plain.stderr.split("saved as ")[1].split()[0]  # one chat, saved after each answer

    def ember(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "engine.cli", "chats", *args], capture_output=True, text=True,
                              env=env, timeout=60, check=True).stdout

    (row,) = json.loads(ember("--json"))["chats"]
    assert (row["id"], row["title"], row["questions"], row["models"]) == (saved, "Hi", 2, ["tiny-llama"])
    assert "[user] And then?" in ember("show", saved) and "[system] Be brief." in ember("show", saved)
    (line,) = [json.loads(x) for x in ember("export", saved).splitlines()]  # as the Playground's Export writes it
    assert [m["role"] for m in line["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert line["model"] == TINY and line["settings"]["max_new_tokens"] == 5
    ember("delete", saved)
    assert json.loads(ember("--json"))["total"] == 0


def test_model_words_and_the_memory_check(tmp_path):
    assert model_ref("smollm2-135m-instruct") == {"builtin": "smollm2-135m-instruct"}
    assert model_ref("Qwen/Qwen2.5-0.5B-Instruct@main") == {"hub": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main"}
    assert model_ref(str(tmp_path)) == {"path": str(tmp_path)}
    # A file (a GGUF export) and a path that is not there yet are paths, never Hub ids: `ember chat out/m.gguf`.
    gguf = tmp_path / "exports" / "model-q4_k_m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    assert model_ref(str(gguf)) == {"path": str(gguf)}
    assert model_ref("exports/missing.gguf")["path"].endswith("/exports/missing.gguf")
    assert model_ref("./tuned")["path"].endswith("/tuned")
    assert model_ref("20261204-abc") == {"run": "20261204-abc"}
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    needed = memory_needed(tmp_path)
    assert needed == 2000 + 600 * 2**20  # 16-bit weights are loaded as float32 on the CPU
    assert memory_problem(needed, needed, "m") is None
    assert memory_problem(4 * 2**30, 2**30, "big-model") == (
        "Not enough memory to load big-model: it needs about 4.0 GiB and 1.0 GiB are free")


def test_idle_workers_are_stopped(ember_home, monkeypatch):
    from tests.conftest import RunningEngine, start_engine_process

    monkeypatch.setenv("EMBER_PLAYGROUND_IDLE_S", "2")
    eng = RunningEngine(ember_home, start_engine_process(ember_home))
    try:
        with eng.client() as c:
            c.timeout = 120
            stream_answer(c, TINY, QUESTION, {"max_new_tokens": 2})
            pid = c.call("playground.workers")["workers"][0]["pid"]
            t0 = time.monotonic()
            wait_for(lambda: c.call("playground.workers")["workers"] == [], 30, what="the idle worker to stop")
            assert time.monotonic() - t0 >= 0.5
            wait_for(lambda: not _alive(pid), 10, what="the worker process to exit")
    finally:
        eng.stop()


def test_an_image_classifier_takes_an_image_file_prepared_as_its_validation_data(engine_with_runs, tmp_path):
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    index = next(i for i, t in enumerate(digits.target) if t == 3)
    path = tmp_path / "three.png"
    Image.fromarray((digits.images[index] * 255 / 16).astype("uint8")).resize((32, 32)).save(path)
    eng, ids = engine_with_runs("digits")
    with eng.client() as c:
        c.timeout = 180
        result = c.call("playground.predict", model={"run": ids["digits"]}, image=str(path))
        assert result["kind"] == "classify" and len(result["labels"]) == len(result["probs"]) == 10
        assert abs(sum(result["probs"]) - 1) < 1e-5
        assert result["probs"][result["labels"].index(result["label"])] == max(result["probs"])
        with pytest.raises(RpcError) as err:
            c.call("playground.predict", model={"run": ids["digits"]}, text="three")
        assert "takes an image" in err.value.message
        with pytest.raises(RpcError) as err:
            c.call("playground.predict", model={"run": ids["digits"]}, image=str(tmp_path / "none.png"))
        assert "Cannot read the image none.png" in err.value.message
        with pytest.raises(RpcError) as err:
            c.call("playground.predict", model={"run": ids["digits"]})
        assert "send text or image" in json.dumps(err.value.data)
