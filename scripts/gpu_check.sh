#!/usr/bin/env bash
# The CUDA checks, on a GPU machine that has the repo and a Python with torch:
#   bash scripts/gpu_check.sh            (writes gpu-check/summary.txt, or $OUT/ when set)
# Packages the machine lacks can travel as wheels in .whl/ (installed to /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check}"
mkdir -p "$out"
py="${PYTHON:-python3}"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$py" -c 'import torch, transformers, peft; print("torch", torch.__version__, "cuda", torch.version.cuda, "| transformers", transformers.__version__, "| peft", peft.__version__)'
  echo "== pytest -m gpu"
} 2>&1 | tee "$out/summary.txt"
"$py" -m pytest -m gpu tests/engine/test_gpu.py tests/engine/test_estimate_gpu.py -p no:cacheprovider -o addopts="" -rA -q --timeout 300 \
  --junitxml "$out/gpu-tests.xml" 2>&1 | tee "$out/pytest.log" | tail -25 | tee -a "$out/summary.txt"
exit "${PIPESTATUS[0]}"
