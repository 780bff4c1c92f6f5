#!/usr/bin/env bash
# The CUDA checks, on a GPU machine that has the repo and a Python with torch (under 8 minutes on one H200):
#   bash scripts/gpu_check.sh            (writes gpu-check/, or $OUT/ when set)
# 1. pytest -m gpu on the GPU test files; 2. benchmarks/mfu_bench.py (1B model, Ember beside a plain loop);
# 3. benchmarks/scaling_bench.py (1..every GPU, each strategy). Every figure lands in summary.json and
# summary.txt; each step has its own time limit, and a package the machine lacks (deepspeed, peft,
# flash-attn, ...) skips what needs it with a message.
# Packages the machine lacks can travel as wheels in .whl/ (installed to /tmp/site).
# GPU_CHECK_CPU=1 runs the same plumbing on a CPU-only machine with tiny sizes (the GPU tests skip).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check}"
mkdir -p "$out"
py="${PYTHON:-python3}"
cpu="${GPU_CHECK_CPU:-0}"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
start=$(date +%s)
steps_file="$out/steps.tsv"  # name, exit status, seconds: read back into summary.json
: >"$steps_file"

# run NAME LIMIT_S LOG COMMAND...: one step with its own time limit; its output to LOG and the console.
run() {
  local name=$1 limit=$2 log=$3 t0 rc
  shift 3
  t0=$(date +%s)
  echo "== $name (limit ${limit}s)" | tee -a "$out/summary.txt"
  timeout --kill-after=15 "$limit" "$@" >"$log" 2>&1
  rc=$?
  [ "$rc" = 124 ] && echo "$name: stopped after its ${limit}s limit" | tee -a "$log"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >>"$steps_file"
  return "$rc"
}

: >"$out/summary.txt"
{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  "$py" - <<'EOF'
import importlib
parts = []
for name in ("torch", "transformers", "peft", "deepspeed", "flash_attn"):
    try:
        mod = importlib.import_module(name)
        parts.append(f"{name} {getattr(mod, '__version__', '?')}")
    except Exception as exc:  # a missing package is reported, and what needs it is skipped
        parts.append(f"{name} missing ({type(exc).__name__})")
import torch
print(" | ".join(parts) + f" | cuda {torch.version.cuda}, available: {torch.cuda.is_available()}, "
      f"GPUs: {torch.cuda.device_count()}")
EOF
} 2>&1 | tee -a "$out/summary.txt" | tee "$out/machine.txt" >/dev/null
cat "$out/machine.txt"

status=0
gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "$cpu" = 1 ]; then
  mfu_args=(--size tiny --device cpu)
  scaling_args=(--device cpu --nproc 2 --steps 16 --warmup 5 --strategies ddp fsdp zero2 zero3)
  pytest_limit=120 mfu_limit=240 scaling_limit=400
else
  mfu_args=(--size 1b --device cuda)
  scaling_args=(--device cuda --nproc "$((gpus > 0 ? gpus : 1))" --steps 25 --warmup 8 --run-timeout 90)
  pytest_limit=240 mfu_limit=220 scaling_limit=150
fi

pytest_files=(tests/engine/test_gpu.py tests/engine/test_estimate_gpu.py tests/engine/test_gpu_speed.py
              tests/engine/test_parallel.py)
run "pytest -m gpu" "$pytest_limit" "$out/pytest.log" \
  "$py" -m pytest -m gpu "${pytest_files[@]}" -p no:cacheprovider -o addopts="" -rA -q --timeout 200 \
  --junitxml "$out/gpu-tests.xml" || status=1
tail -25 "$out/pytest.log" | tee -a "$out/summary.txt"

run "mfu_bench ${mfu_args[*]}" "$mfu_limit" "$out/mfu_bench.log" \
  "$py" benchmarks/mfu_bench.py "${mfu_args[@]}" --json "$out/mfu.json" || status=1
grep -v '^\s*$' "$out/mfu_bench.log" | tail -12 | tee -a "$out/summary.txt"

# No DeepSpeed on the machine: scaling_bench skips ZeRO-2/3 and says so; DDP and FSDP2 still run.
run "scaling_bench ${scaling_args[*]}" "$scaling_limit" "$out/scaling_bench.log" \
  "$py" benchmarks/scaling_bench.py "${scaling_args[@]}" --json "$out/scaling.json" || status=1
sed -n '/^strategy/,$p' "$out/scaling_bench.log" | tee -a "$out/summary.txt"
grep -E 'skipped|failed' "$out/scaling_bench.log" | tee -a "$out/summary.txt"

OUT_DIR="$out" TOTAL_S="$(($(date +%s) - start))" CPU_MODE="$cpu" "$py" - <<'EOF' | tee -a "$out/summary.txt"
import json, os, xml.etree.ElementTree as ET
from pathlib import Path

out = Path(os.environ["OUT_DIR"])
summary = {"cpu_mode": os.environ["CPU_MODE"] == "1", "total_s": int(os.environ["TOTAL_S"]),
           "machine": (out / "machine.txt").read_text(errors="replace").strip().splitlines()}
summary["steps"] = [dict(zip(("name", "exit_status", "seconds"), line.split("\t")))
                    for line in (out / "steps.tsv").read_text().splitlines() if line]
tests = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "cases": []}
try:
    for case in ET.parse(out / "gpu-tests.xml").getroot().iter("testcase"):
        outcome = ("failed" if case.find("failure") is not None else "errors" if case.find("error") is not None
                   else "skipped" if case.find("skipped") is not None else "passed")
        tests[outcome] += 1
        tests["cases"].append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                               "seconds": float(case.get("time") or 0)})
except (OSError, ET.ParseError) as exc:
    tests["note"] = f"no test report ({exc})"
summary["pytest"] = tests
for key, name in (("mfu_bench", "mfu.json"), ("scaling_bench", "scaling.json")):
    try:
        summary[key] = json.loads((out / name).read_text())
    except (OSError, ValueError) as exc:
        summary[key] = {"missing": f"{name}: {exc}"}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(f"== summary: pytest {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
      f"{tests['skipped']} skipped; steps: " + ", ".join(f"{s['name'].split()[0]} rc={s['exit_status']} "
                                                          f"{s['seconds']}s" for s in summary["steps"]))
print(f"total {summary['total_s']} s; every figure in {out}/summary.json")
EOF
exit "$status"
