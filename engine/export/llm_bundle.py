"""The Jetson bundle of a language model: a GGUF file and what a Jetson needs to build, time and chat with it.

``jetson/<name>/`` holds the GGUF file (the smallest the export wrote, unless named), ``llama.cpp-src.tar.gz``
(the llama.cpp source that made and checked it, when this machine has it: ``scripts/llama_cpp.sh`` keeps it),
``build_llama_cpp.sh`` (the installed llama.cpp, else a build from that source with CUDA for the target's
compute capability), ``benchmark.sh`` (llama-bench: prompt and generated tokens/s, as JSON), ``chat.sh``,
``README.md`` and ``manifest.json`` (sha256 and size of every file), written all-or-nothing as the TensorRT
bundle is (engine/export/jetson_bundle.py). The one-click path (engine/export/deploy.py, runtime
``llama.cpp``) copies it to the device, runs the two scripts there and reads llama-bench's figures.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from engine.export import jetson_profiles
from engine.export.jetson_bundle import fill_template, write_folder, write_script
from engine.training.context import JobFailed

FORMAT = "ember.jetson-llm-bundle/1"
SOURCE_TARBALL = "llama.cpp-src.tar.gz"
BUILD_SCRIPT, BENCH_SCRIPT = "build_llama_cpp.sh", "benchmark.sh"
PROMPT_TOKENS, GEN_TOKENS, REPETITIONS = 128, 64, 3


def pick_gguf(files: dict[str, dict[str, Any]], wanted: str | None) -> tuple[str, Path]:
    """(type, path) of the GGUF file to bundle: ``wanted``, else the smallest (a Jetson's memory is shared)."""
    if wanted:
        if wanted not in files:
            raise JobFailed(f"jetson_gguf {wanted!r} is not among the GGUF files written ({', '.join(files)})",
                            "Add it to gguf_types, or leave jetson_gguf empty for the smallest.")
        return wanted, Path(files[wanted]["path"])
    kind = min(files, key=lambda k: files[k].get("bytes") or 0)
    return kind, Path(files[kind]["path"])


def write_llm_bundle(out_dir: str | Path, *, gguf: Path, gguf_type: str, target: str, jetpack: str | None,
                     source: str, spec_sha256: str | None, llama_source: Path | None,
                     llama_version: str) -> dict[str, Any]:
    """Write the bundle at ``out_dir`` (replacing one there); returns {path, files, manifest}."""
    out_dir = Path(out_dir)
    prof = jetson_profiles.profile(target)
    versions = jetson_profiles.jetpack_versions(target, jetpack)
    if not gguf.is_file():
        raise JobFailed(f"no GGUF file to bundle ({gguf})", "Export format gguf in the same job.")
    size = gguf.stat().st_size
    most = max(prof["memory_gb"]) * 1e9
    notes = []
    if size > 0.8 * most:
        notes.append(f"{gguf.name} is {size / 1e9:.1f} GB and a {prof['title']} has at most {most / 1e9:.0f} GB "
                     "shared by the CPU and GPU: pick a smaller GGUF type")
    arch = str(prof["compute_capability"]).replace(".", "")
    values = {"TITLE": prof["title"], "JETPACK": versions["jetpack"], "CUDA": versions["cuda"], "NAME": out_dir.name,
              "SOURCE": source, "GGUF": gguf.name, "GGUF_TYPE": gguf_type, "GGUF_SIZE": f"{size / 1e6:.0f} MB",
              "CUDA_ARCH": arch, "LLAMA_VERSION": llama_version, "PROMPT": str(PROMPT_TOKENS),
              "GEN": str(GEN_TOKENS), "REPS": str(REPETITIONS)}

    def fill(tmp: Path) -> None:
        shutil.copyfile(gguf, tmp / gguf.name)
        if llama_source is not None and llama_source.is_file():
            shutil.copyfile(llama_source, tmp / SOURCE_TARBALL)
        (tmp / "README.md").write_text(fill_template("llm_README.md", values), encoding="utf-8")
        for script, template in ((BUILD_SCRIPT, "build_llama_cpp.sh.in"), (BENCH_SCRIPT, "llm_benchmark.sh.in"),
                                 ("chat.sh", "llm_chat.sh.in")):
            write_script(tmp / script, fill_template(template, values))

    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "source": source,
                "spec_sha256": spec_sha256, "task": "causal_lm", "runtime": "llama.cpp", "target": target,
                "target_title": prof["title"], "jetpack": versions["jetpack"], "l4t": versions["l4t"],
                "cuda": versions["cuda"], "cuda_arch": arch, "gguf": gguf.name, "gguf_type": gguf_type,
                "llama_cpp": llama_version, "has_source": bool(llama_source and llama_source.is_file()),
                "benchmark": {"prompt_tokens": PROMPT_TOKENS, "gen_tokens": GEN_TOKENS, "repetitions": REPETITIONS},
                "notes": notes}
    return write_folder(out_dir, fill, manifest)
