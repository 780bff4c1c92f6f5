"""Language-model export: the built-in SmolLM2-135M-Instruct through `ember export` to a merged checkpoint,
GGUF f16 and q4_k_m (llama.cpp's converter and quantizer) and ONNX-GenAI fp32 and int4, each file run in its
own runtime in a fresh process. (A tuned SmolLM2 is exported in tests/engine/test_llm_loop.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api.specs import SpecError, validate_spec
from engine.export import llm_formats
from engine.export.llm_check import compare
from engine.inference.runtimes import pick
from tests.engine.test_finetune import wait_final

ROOT = Path(__file__).resolve().parents[2]


# A 135M model converted five ways and run six times (PyTorch, transformers, two ONNX, two GGUF) on 2 cores.
@pytest.mark.timeout(900)
def test_builtin_smollm2_to_every_llm_format_through_ember_export(engine_proc):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "engine.cli", "export", "smollm2-135m-instruct",
                          "--gguf-types", "f16,q4_k_m", "--genai-precisions", "fp32,int4", "--check-prompts", "3",
                          "--check-tokens", "12", "--parity-samples", "6", "--name", "smollm2-files"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with engine_proc.client() as c:
        (job,) = [j for j in c.call("jobs.list")["jobs"] if j["name"] == "smollm2-files"]
    result = json.loads((Path(job["run_dir"]) / "result.json").read_text())
    assert result["model"] == {"builtin": "smollm2-135m-instruct"} and set(result["formats"]) == {"hf", "gguf", "onnx_genai"}
    ref_ppl = result["reference"]["perplexity"]
    assert 1 < ref_ppl < 1000

    hf = result["formats"]["hf"]
    assert hf["content"] == "merged" and (Path(hf["path"]) / "model.safetensors").is_file()
    assert (Path(hf["path"]) / "tokenizer_config.json").is_file() and (Path(hf["path"]) / "generation_config.json").is_file()
    checks = {"hf": hf["check"]}
    for fmt in ("gguf", "onnx_genai"):
        for kind, f in result["formats"][fmt]["files"].items():
            checks[f"{fmt}/{kind}"] = f["check"]
            assert Path(f["path"]).exists() and f["bytes"] > 10 * 2**20
    assert set(checks) == {"hf", "gguf/f16", "gguf/q4_k_m", "onnx_genai/fp32", "onnx_genai/int4"}
    assert {c["runtime"] for c in checks.values()} == {"transformers", "llama.cpp", "onnxruntime-genai"}
    for name in ("hf", "gguf/f16", "onnx_genai/fp32"):  # full precision: the same answers, token for token
        c = checks[name]
        assert c["enforced"] and c["identical_answers"] == c["prompts"] == 3 and abs(c["perplexity_change"]) < 0.01, (name, c)
        assert c["tokens_per_s"] > 0 and c["ttft_s"] > 0 and c["batch"] == 4 and c["batch_tokens_per_s"] > 0
    for name in ("gguf/q4_k_m", "onnx_genai/int4"):  # 4-bit: reported, and measurably not the same model
        c = checks[name]
        assert c["reported_because"] == "quantized" and c["perplexity"] > ref_ppl * 1.001 and 0 <= c["token_agreement"] <= 1
    files = result["formats"]["gguf"]["files"]
    assert files["q4_k_m"]["bytes"] < 0.5 * files["f16"]["bytes"]
    assert result["formats"]["onnx_genai"]["files"]["int4"]["bytes"] < 0.5 * result["formats"]["onnx_genai"]["files"]["fp32"]["bytes"]
    modelfile = Path(result["formats"]["gguf"]["modelfile"]).read_text()
    assert modelfile.startswith("FROM ./smollm2-135m-instruct-q4_k_m.gguf") and "<|im_start|>" in modelfile
    assert "PARAMETER stop \"<|im_end|>\"" in modelfile
    # The system prompt SmolLM2's template adds by itself, which the model was tuned and checked with.
    assert 'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""' in modelfile
    assert "same answers" in out.stdout and "gguf q4_k_m" in out.stdout and "ollama create" in out.stdout
    assert "b4 tok/s" in out.stdout and "first token" in out.stdout
    assert result["reference"]["batch"] == 4 and result["reference"]["batch_tokens_per_s"] > 0
    assert not any(p.name.startswith(".") for p in (Path(job["run_dir"]) / "export").iterdir())  # nothing left over
    # Every stage says where it is: the reference and each file's check, prompt by prompt.
    with engine_proc.client() as c:
        said = [e["data"]["message"] for e in c.call("events.query", topics=[f"run/{job['id']}/progress"],
                                                       limit=10_000)["events"]]
    for line in ("reference in PyTorch: answering prompt 3 of 3", "reference in PyTorch: scoring conversation 6 of 6",
                 "checking hf in transformers: answering prompt 1 of 3",
                 "checking gguf/q4_k_m in llama.cpp: timing 4 requests at once"):
        assert line in said, said

    # Each file by its path, as docs/serve.md shows: `ember serve FILE.gguf` serves the f16 GGUF in llama.cpp
    # behind Ember's OpenAI-compatible server, and `ember chat FOLDER` answers with the fp32 ONNX in ONNX Runtime
    # GenAI; both answer a new question greedily alike (the check above compared both with PyTorch token for token).
    import openai

    question = "What is the capital of France?"
    cli = [sys.executable, "-m", "engine.cli"]
    served = subprocess.run([*cli, "serve", files["f16"]["path"], "--port", "0", "--detach"], capture_output=True,
                            text=True, env=env, timeout=600)
    assert served.returncode == 0, served.stderr[-2000:]
    url = served.stdout.strip().splitlines()[0]
    job_id = served.stderr.split(":", 1)[0].removeprefix("job ")
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
    name = client.models.list().data[0].id
    reply = client.chat.completions.create(model=name, temperature=0, max_tokens=12,
                                           messages=[{"role": "user", "content": question}])
    answers = {"gguf": reply.choices[0].message.content}
    stream = client.chat.completions.create(model=name, temperature=0, max_tokens=12, stream=True,
                                            messages=[{"role": "user", "content": question}])
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == answers["gguf"]
    with engine_proc.client() as c:
        assert c.call("jobs.get", id=job_id)["state"] == "running"
        c.call("jobs.stop", id=job_id)
        wait_final(c, job_id, timeout=60)
    chat = subprocess.run([*cli, "chat", result["formats"]["onnx_genai"]["files"]["fp32"]["path"], question,
                           "--temperature", "0", "--max-new-tokens", "12", "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert chat.returncode == 0, chat.stderr[-2000:]
    answers["onnx"] = json.loads(chat.stdout.strip().splitlines()[-1])["text"]
    chat = subprocess.run([*cli, "chat", hf["path"], question, "--temperature", "0", "--max-new-tokens", "12",
                           "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert chat.returncode == 0, chat.stderr[-2000:]
    answers["hf"] = json.loads(chat.stdout.strip().splitlines()[-1])["text"]
    assert answers["onnx"] == answers["gguf"] == answers["hf"] and "Paris" in answers["onnx"], answers


def test_the_modelfile_keeps_the_templates_own_system_prompt(tmp_path):
    chatml = ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n?<|im_end|>\n"
              "<|im_start|>assistant\n")
    assert llm_formats.default_system(chatml) == "You are terse."
    llama3 = ("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: 2023<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\n?<|eot_id|>")
    assert llm_formats.default_system(llama3) == "Cutting Knowledge Date: 2023"
    assert llm_formats.default_system("<|im_start|>user\n?<|im_end|>\n") is None  # no system block: none
    path = llm_formats.write_modelfile(tmp_path, "m.gguf", chatml, "<|im_end|>", "You are terse.")
    text = path.read_text()
    assert 'SYSTEM """You are terse."""' in text and "{{ if .System }}" in text


def test_export_specs_for_language_models_say_what_is_wrong():
    ok = validate_spec("export.model", {"model": {"builtin": "smollm2-135m-instruct"}, "formats": ["gguf"]})
    assert ok.gguf_types == ["f16", "q4_k_m"] and ok.genai_precisions == ["fp32", "int4"]
    bad = {
        "name the model to export": {"formats": ["hf"]},
        "cannot share a job with onnx": {"source_run": "r1", "formats": ["hf", "onnx"]},
        "language-model formats only": {"model": {"builtin": "smollm2-135m-instruct"}, "formats": ["onnx"]},
        "gguf_types lists a value twice": {"source_run": "r1", "formats": ["gguf"], "gguf_types": ["f16", "f16"]},
    }
    for message, spec in bad.items():
        with pytest.raises(SpecError, match=message):
            validate_spec("export.model", spec)


def test_missing_llama_cpp_is_named_with_the_command_that_installs_it(monkeypatch, tmp_path):
    monkeypatch.setenv(llm_formats.LLAMA_CPP_HOME, str(tmp_path))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert llm_formats.llama_cpp_home() is None
    assert "converter" in (llm_formats.gguf_missing() or "")
    with pytest.raises(Exception, match="Cannot write GGUF") as err:
        llm_formats.convert_gguf(tmp_path, tmp_path / "x.gguf", "f16")
    assert "scripts/llama_cpp.sh" in err.value.hint


def test_compare_counts_identical_answers_and_where_they_part():
    ref = {"tokens": [[1, 2, 3], [4, 5], [6]], "perplexity": 10.0}
    got = {"tokens": [[1, 2, 3], [4, 9], [7, 8]], "perplexity": 10.5}
    c = compare(ref, got)
    assert c["identical_answers"] == 1 and c["first_difference"] == [None, 1, 0]
    assert c["token_agreement"] == pytest.approx(4 / 6) and c["perplexity_change"] == pytest.approx(0.05)


def test_the_next_token_is_picked_as_transformers_picks_it():
    import numpy as np

    from engine.api.playground import GenerateSettings

    rng = np.random.default_rng(0)
    logits = np.array([1.0, 3.0, 2.0, -1.0])
    assert pick(logits, GenerateSettings(temperature=0), rng, []) == 1
    assert pick(logits, GenerateSettings(temperature=0, repetition_penalty=2.0), rng, [1]) == 2  # 3/2 < 2
    assert {pick(logits, GenerateSettings(temperature=1.0, top_k=1), rng, []) for _ in range(20)} == {1}
    drawn = [pick(logits, GenerateSettings(temperature=1.0, top_k=0, top_p=0.8), rng, []) for _ in range(400)]
    assert set(drawn) == {1, 2}  # 0 and 3 lie outside the top 80% of the probability (as transformers cuts)
    assert 0.6 < drawn.count(1) / len(drawn) < 0.85  # e^3 / (e^3 + e^2) = 0.73
