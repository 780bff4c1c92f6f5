"""Jetson modules and the JetPack releases each runs: L4T, TensorRT and CUDA versions.

Used to pick the TensorRT version a bundle is checked and documented against, and to read a host probe.

Sources:

- NVIDIA's JetPack archive / release notes (developer.nvidia.com/embedded/jetpack-archive) as tabulated in
  public notes: JetPack 4.6 = L4T R32.6.1, TensorRT 8.0.1, CUDA 10.2; JetPack 4.6.1 = R32.7.1, TensorRT 8.2.1,
  CUDA 10.2 (4.6.2 ... 4.6.6 are R32.7.2 ... R32.7.6 with the same TensorRT and CUDA); JetPack 5.0.2 = R35.1,
  TensorRT 8.4.1, CUDA 11.4; JetPack 5.1 / 5.1.1 / 5.1.2 = R35.2.1 / R35.3.1 / R35.4.1, TensorRT 8.5.2,
  CUDA 11.4 (5.1.3 = R35.5.0, 5.1.4 = R35.6.0, 5.1.5 = R35.6.1); JetPack 6.0 = R36.3, TensorRT 8.6.2,
  CUDA 12.2; JetPack 6.1 = R36.4 with "CUDA 12.6, TensorRT 10.3, cuDNN 9.3" and JetPack 6.2 the same stack
  (pytorch.org/TensorRT "Torch-TensorRT in JetPack" pages); JetPack 6.2.1 = R36.4.4, which the Jetson Linux 38.x
  guide names as the release for Orin (38.x does not support Orin).
- NVIDIA's Orin DLA matrix (NVIDIA/Deep-Learning-Accelerator-SW) lists "Jetson Orin (Embedded): JetPack 5.1.1,
  DLA 3.12.1, TensorRT 8.5.2".
- Module facts (compute capability, DLA cores, memory) from the Jetson module data sheets: Orin is Ampere sm_87
  (Orin Nano: no DLA; Orin NX 16 GB: 2 DLA cores, 8 GB: 1; AGX Orin: 2), Xavier is Volta sm_72 with 2 DLA
  cores, the original Nano is Maxwell sm_53, whose GPU has no fast int8 path, so TensorRT builds it in
  fp32/fp16 only. Xavier stops at JetPack 5.1.x and the Nano at 4.6.x.
"""

from __future__ import annotations

import re
from typing import Any

from engine.training.context import JobFailed

# JetPack -> versions, one table for all modules; each module lists the JetPacks it runs.
JETPACKS: dict[str, dict[str, str]] = {
    "4.6": {"l4t": "32.6.1", "tensorrt": "8.0.1", "cuda": "10.2"},
    "4.6.1": {"l4t": "32.7.1", "tensorrt": "8.2.1", "cuda": "10.2"},
    "4.6.2": {"l4t": "32.7.2", "tensorrt": "8.2.1", "cuda": "10.2"},
    "4.6.3": {"l4t": "32.7.3", "tensorrt": "8.2.1", "cuda": "10.2"},
    "4.6.4": {"l4t": "32.7.4", "tensorrt": "8.2.1", "cuda": "10.2"},
    "4.6.5": {"l4t": "32.7.5", "tensorrt": "8.2.1", "cuda": "10.2"},
    "4.6.6": {"l4t": "32.7.6", "tensorrt": "8.2.1", "cuda": "10.2"},
    "5.0.2": {"l4t": "35.1.0", "tensorrt": "8.4.1", "cuda": "11.4"},
    "5.1": {"l4t": "35.2.1", "tensorrt": "8.5.2", "cuda": "11.4"},
    "5.1.1": {"l4t": "35.3.1", "tensorrt": "8.5.2", "cuda": "11.4"},
    "5.1.2": {"l4t": "35.4.1", "tensorrt": "8.5.2", "cuda": "11.4"},
    "5.1.3": {"l4t": "35.5.0", "tensorrt": "8.5.2", "cuda": "11.4"},
    "5.1.4": {"l4t": "35.6.0", "tensorrt": "8.5.2", "cuda": "11.4"},
    "5.1.5": {"l4t": "35.6.1", "tensorrt": "8.5.2", "cuda": "11.4"},
    "6.0": {"l4t": "36.3.0", "tensorrt": "8.6.2", "cuda": "12.2"},
    "6.1": {"l4t": "36.4.0", "tensorrt": "10.3.0", "cuda": "12.6"},
    "6.2": {"l4t": "36.4.3", "tensorrt": "10.3.0", "cuda": "12.6"},
    "6.2.1": {"l4t": "36.4.4", "tensorrt": "10.3.0", "cuda": "12.6"},
}

_ORIN_JP = ("5.1.1", "5.1.2", "5.1.3", "5.1.4", "5.1.5", "6.0", "6.1", "6.2", "6.2.1")
_XAVIER_JP = ("4.6", "4.6.1", "4.6.2", "4.6.3", "4.6.4", "4.6.5", "4.6.6", "5.0.2", "5.1", "5.1.1", "5.1.2",
              "5.1.3", "5.1.4", "5.1.5")

PROFILES: dict[str, dict[str, Any]] = {
    "orin_nano": {"title": "Jetson Orin Nano", "gpu_arch": "Ampere", "compute_capability": "8.7",
                  "memory_gb": (4, 8), "dla_cores": 0, "precisions": ("fp32", "fp16", "int8"),
                  "jetpacks": _ORIN_JP},
    "orin_nx": {"title": "Jetson Orin NX", "gpu_arch": "Ampere", "compute_capability": "8.7",
                "memory_gb": (8, 16), "dla_cores": 2, "dla_note": "the 8 GB module has 1 DLA core",
                "precisions": ("fp32", "fp16", "int8"), "jetpacks": ("5.1",) + _ORIN_JP},
    "agx_orin": {"title": "Jetson AGX Orin", "gpu_arch": "Ampere", "compute_capability": "8.7",
                 "memory_gb": (32, 64), "dla_cores": 2, "precisions": ("fp32", "fp16", "int8"),
                 "jetpacks": ("5.0.2", "5.1") + _ORIN_JP},
    "xavier_nx": {"title": "Jetson Xavier NX", "gpu_arch": "Volta", "compute_capability": "7.2",
                  "memory_gb": (8, 16), "dla_cores": 2, "precisions": ("fp32", "fp16", "int8"),
                  "jetpacks": _XAVIER_JP},
    "agx_xavier": {"title": "Jetson AGX Xavier", "gpu_arch": "Volta", "compute_capability": "7.2",
                   "memory_gb": (8, 16, 32, 64), "dla_cores": 2, "precisions": ("fp32", "fp16", "int8"),
                   "jetpacks": _XAVIER_JP},
    "nano": {"title": "Jetson Nano", "gpu_arch": "Maxwell", "compute_capability": "5.3",
             "memory_gb": (2, 4), "dla_cores": 0, "precisions": ("fp32", "fp16"),
             "precision_note": "Maxwell has no fast int8 path: TensorRT builds fp32 or fp16 here",
             "jetpacks": ("4.6", "4.6.1", "4.6.2", "4.6.3", "4.6.4", "4.6.5", "4.6.6")},
}
for _name, _p in PROFILES.items():
    _p["default_jetpack"] = _p["jetpacks"][-1]  # the newest one the module runs


def _vkey(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def profile(name: str) -> dict[str, Any]:
    if name not in PROFILES:
        raise JobFailed(f"unknown Jetson target {name!r}", f"use one of: {', '.join(PROFILES)}")
    return {"name": name, **PROFILES[name]}


def jetpack_versions(name: str, jetpack: str | None = None) -> dict[str, str]:
    """{jetpack, l4t, tensorrt, cuda} for ``name`` on ``jetpack`` (None: the module's newest)."""
    p = profile(name)
    jp = p["default_jetpack"] if jetpack is None else str(jetpack).strip()
    if jp.count(".") >= 2 and jp.endswith(".0") and jp[:-2] in JETPACKS:
        jp = jp[:-2]  # 6.1.0 is 6.1
    if jp not in p["jetpacks"]:
        if jp in JETPACKS:
            raise JobFailed(f"{p['title']} does not run JetPack {jp}",
                            f"{p['title']} runs JetPack {', '.join(p['jetpacks'])}.")
        raise JobFailed(f"unknown JetPack version {jp!r}",
                        f"known for {p['title']}: {', '.join(p['jetpacks'])}.")
    return {"jetpack": jp, **JETPACKS[jp]}


def _jetpack_for_l4t(l4t: str) -> str | None:
    want = _vkey(l4t)
    for jp, row in JETPACKS.items():
        if _vkey(row["l4t"]) == want or (len(want) == 2 and _vkey(row["l4t"])[:2] == want):
            return jp
    # same release line (R36.4.x): the newest JetPack of that line at or below it
    line = [(jp, _vkey(row["l4t"])) for jp, row in JETPACKS.items() if _vkey(row["l4t"])[:2] == want[:2]]
    line = [jp for jp, key in line if key <= want] or [jp for jp, _ in line]
    return line[-1] if line else None


def from_probe(jetson_facts: dict[str, Any]) -> dict[str, Any]:
    """Best guess of {jetpack, l4t, tensorrt, cuda, source} from a host probe.

    ``jetson_facts`` holds what the host reports, as dpkg spells it: ``{"l4t": "R36.4.0", "jetpack":
    "6.1+b123", "tensorrt": "10.3.0.30-1+cuda12.5", "cuda": "12.6"}`` (any may be missing). Reported values
    win; the JetPack table fills the rest (from the JetPack, else from the L4T release).
    """
    facts = {k: str(v).strip() for k, v in (jetson_facts or {}).items() if v}
    jp = None
    if "jetpack" in facts:
        m = re.match(r"(\d+(?:\.\d+)*)", facts["jetpack"])
        if m:
            jp = m.group(1)
            if jp not in JETPACKS and jp.endswith(".0") and jp[:-2] in JETPACKS:
                jp = jp[:-2]
    l4t = None
    if "l4t" in facts:
        # "R36.4.0", "36.4.0-20240912212859" (nvidia-l4t-core) or /etc/nv_tegra_release's "# R32 (release), REVISION: 7.1"
        m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*(\d+(?:\.\d+)*)", facts["l4t"])
        if m:
            l4t = f"{m.group(1)}.{m.group(2)}"
        else:
            m = re.search(r"(\d+(?:\.\d+)+)", facts["l4t"])
            l4t = m.group(1) if m else None
    source = "probe"
    if (jp is None or jp not in JETPACKS) and l4t:
        jp = _jetpack_for_l4t(l4t) or jp
        source = "l4t"
    row = JETPACKS.get(jp or "", {})
    trt = None
    if "tensorrt" in facts:
        m = re.match(r"(\d+(?:\.\d+){0,2})", facts["tensorrt"])  # 10.3.0.30-1+cuda12.5 -> 10.3.0
        trt = m.group(1) if m else None
    cuda = None  # not the "+cuda12.5" of a TensorRT package: that is the CUDA it was built with
    if "cuda" in facts:
        m = re.search(r"(\d+\.\d+)", facts["cuda"])
        cuda = m.group(1) if m else None
    return {"jetpack": jp, "l4t": l4t or row.get("l4t"), "tensorrt": trt or row.get("tensorrt"),
            "cuda": cuda or row.get("cuda"), "source": source if row else "unknown"}
