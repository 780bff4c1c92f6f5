"""Language-model formats: a merged Hugging Face checkpoint, GGUF (llama.cpp) and ONNX for generation.

- ``hf``: ``save_pretrained`` of the merged model (safetensors), the tokenizer with the chat template the
  run trained with, and the generation config; or, with ``adapter: separate``, the LoRA adapter alone
  (peft's adapter_model.safetensors and adapter_config.json) pointing at its base folder.
- ``gguf``: llama.cpp's own converter (``convert_hf_to_gguf.py`` from the llama.cpp source that
  llama-cpp-python is built from, installed by scripts/llama_cpp.sh) writes f16 (or bf16); llama.cpp's
  quantizer (``llama_model_quantize`` in libllama, through llama-cpp-python) writes q8_0, q4_k_m and the
  others from it. An Ollama ``Modelfile`` goes beside them.
- ``onnx_genai``: onnxruntime-genai's model builder: a decoder with past key/values, its genai_config.json
  and tokenizer, fp32, fp16 or int4 (the builder's weight-only MatMulNBits).

Each tool runs in a child process with its output in ``<format>/build.log``, so a crash or a message from
C code lands in the log and the job's failure names it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine.training.context import JobFailed

LLAMA_CPP_HOME = "EMBER_LLAMA_CPP"  # a folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/
QUANT_TYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
               "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}
CONVERT_TYPES = ("f16", "bf16")  # written by the converter itself
TIMEOUT_S = 3600
SETUP_HINT = "Run `bash scripts/llama_cpp.sh` once (it builds llama.cpp and installs its converter), then export again."

# Runs the converter the way `python convert_hf_to_gguf.py ...` does, also from a frozen build.
_RUN_SCRIPT = "import runpy, sys\nsys.argv = sys.argv[1:]\nsys.path.insert(0, sys.argv[0].rpartition('/')[0])\n" \
              "runpy.run_path(sys.argv[0], run_name='__main__')\n"


def llama_cpp_home() -> Path | None:
    """Where llama.cpp's converter is: $EMBER_LLAMA_CPP, else <prefix>/share/llama.cpp of this Python."""
    for folder in (os.environ.get(LLAMA_CPP_HOME), str(Path(sys.prefix) / "share" / "llama.cpp")):
        if folder and (Path(folder) / "convert_hf_to_gguf.py").is_file():
            return Path(folder)
    return None


def llama_source() -> tuple[Path | None, str]:
    """(llama.cpp's source as a .tar.gz, its version) from the converter's folder, for a Jetson bundle to build
    on the device; (None, version or 'unknown') when scripts/llama_cpp.sh kept no source here."""
    home = llama_cpp_home()
    if home is None:
        return None, "unknown"
    version_file = home / "VERSION"
    version = version_file.read_text().strip() if version_file.is_file() else "unknown"
    source = home / "llama.cpp-src.tar.gz"
    return (source if source.is_file() else None), version


def gguf_missing() -> str | None:
    """Why GGUF cannot be written here, or None."""
    try:
        import llama_cpp  # noqa: F401 - the quantizer and the check's runtime
    except ImportError:
        return "llama-cpp-python (llama.cpp) is not installed"
    if llama_cpp_home() is None:
        return "llama.cpp's converter (convert_hf_to_gguf.py) is not installed"
    return None


def genai_missing() -> str | None:
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return "onnxruntime-genai is not installed (pip install onnxruntime-genai; it needs Python 3.11 or newer)"
    return None


def _run(cmd: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(cmd[-6:])}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=TIMEOUT_S,
                                  env=env if env is not None else dict(os.environ), check=False)
        except subprocess.TimeoutExpired as exc:
            raise JobFailed(f"{what} ran past {TIMEOUT_S} s", f"See {log}.") from exc
    if proc.returncode != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        raise JobFailed(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)[-600:]}",
                        f"The whole output is in {log}.")


# ---------------------------------------------------------------- hf


def write_hf(model: Any, tokenizer: Any, out: Path) -> None:
    """The merged model as save_pretrained writes it, with the tokenizer and its chat template."""
    out.mkdir(parents=True, exist_ok=True)
    model.config.use_cache = True
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    config = getattr(model, "generation_config", None)
    if config is not None and not (out / "generation_config.json").is_file():
        config.save_pretrained(str(out))


def write_adapter(peft_model: Any, tokenizer: Any, base_folder: Path, out: Path) -> None:
    """The LoRA adapter alone, pointing at its base model folder."""
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out))
    config = out / "adapter_config.json"
    doc = json.loads(config.read_text())
    doc["base_model_name_or_path"] = str(base_folder)
    config.write_text(json.dumps(doc, indent=2))
    tokenizer.save_pretrained(str(out))


# ---------------------------------------------------------------- onnx_genai


def write_genai(hf_folder: Path, out: Path, precision: str, cache: Path) -> None:
    """onnxruntime-genai's model builder, for the CPU."""
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder), "-o", str(out),
           "-p", precision, "-e", "cpu", "-c", str(cache)]
    _run(cmd, out.parent / f"build-{precision}.log", f"onnxruntime-genai's model builder ({precision})")
    if not (out / "genai_config.json").is_file():
        raise JobFailed(f"The model builder wrote no genai_config.json in {out}", f"See {out.parent}/build-{precision}.log.")


# ---------------------------------------------------------------- gguf


def convert_gguf(hf_folder: Path, out_file: Path, outtype: str) -> None:
    """llama.cpp's converter, with the gguf-py package of the same llama.cpp source beside it."""
    why, home = gguf_missing(), llama_cpp_home()
    if why or home is None:
        raise JobFailed(f"Cannot write GGUF: {why}", SETUP_HINT)
    cmd = [sys.executable, "-c", _RUN_SCRIPT, str(home / "convert_hf_to_gguf.py"), str(hf_folder),
           "--outfile", str(out_file), "--outtype", outtype]
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # its own gguf-py, not site-packages'
    _run(cmd, out_file.parent / "build.log", f"llama.cpp's converter ({outtype})", env)


def quantize_gguf(source: Path, out_file: Path, qtype: str) -> None:
    """llama.cpp's quantizer, in a child process (it prints per tensor, and a crash must not end the job)."""
    code = ("import ctypes, sys, llama_cpp\n"
            "p = llama_cpp.llama_model_quantize_default_params()\n"
            f"p.ftype = llama_cpp.{QUANT_TYPES[qtype]}\n"
            "p.nthread = 0\n"
            "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))\n")
    _run([sys.executable, "-c", code, str(source), str(out_file)], out_file.parent / "build.log",
         f"llama.cpp's quantizer ({qtype})")


def _ollama_template(template: str) -> tuple[str, list[str]] | None:
    """An Ollama (Go) TEMPLATE and its stop words for the chat template families Ember knows."""
    if "<|im_start|>" in template:
        return ('{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}'
                '{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}'
                '<|im_start|>assistant\n', ["<|im_start|>", "<|im_end|>"])
    if "<|start_header_id|>" in template:
        return ('{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}'
                '{{ range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>'
                '{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n', ["<|eot_id|>", "<|start_header_id|>"])
    if "### " in template:  # Ember's plain template
        return ('{{ if .System }}### System:\n{{ .System }}\n\n{{ end }}{{ range .Messages }}'
                '### {{ if eq .Role "user" }}User{{ else }}Assistant{{ end }}:\n{{ .Content }}\n\n{{ end }}'
                '### Assistant:\n', ["### User:"])
    return None


# The system block a chat template writes: ChatML's, and Llama 3's.
_SYSTEM_BLOCKS = (re.compile(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", re.S),
                  re.compile(r"<\|start_header_id\|>system<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.S))


def default_system(rendered: str) -> str | None:
    """The system prompt a chat template adds by itself, from a conversation rendered with no system message
    (SmolLM2's: "You are a helpful AI assistant named SmolLM, trained by Hugging Face"). A model was trained
    and checked with it; without it, llama.cpp and Ollama give the same model other (often empty) answers."""
    for block in _SYSTEM_BLOCKS:
        found = block.search(rendered)
        if found and found.group(1).strip():
            return found.group(1).strip()
    return None


def write_modelfile(folder: Path, gguf_name: str, template: str, eos_token: str | None,
                    system: str | None = None) -> Path:
    """An Ollama Modelfile for ``gguf_name``: ``ollama create NAME -f Modelfile`` in that folder. ``system``:
    the template's own system prompt (default_system), which Ollama's TEMPLATE gets as .System."""
    lines = [f"FROM ./{gguf_name}"]
    known = _ollama_template(template)
    if known:
        go, stops = known
        lines.append(f'TEMPLATE """{go}"""')
        lines += [f'PARAMETER stop "{s}"' for s in stops]
    if system:
        lines.append('SYSTEM """' + system.replace('"""', '" " "') + '"""')
    else:  # Ollama then uses the chat template stored in the GGUF's metadata
        lines.append("# the chat template is the one stored in the GGUF file (tokenizer.chat_template)")
    if eos_token and not (known and eos_token in known[1]):
        lines.append(f'PARAMETER stop "{eos_token}"')
    lines.append("PARAMETER temperature 0.7")
    path = folder / "Modelfile"
    path.write_text("\n".join(lines) + "\n")
    return path
