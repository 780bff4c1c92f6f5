#!/usr/bin/env bash
# Screenshots of a language model's export (merged checkpoint, GGUF, ONNX-GenAI), its files on Compare and the
# Playground serving it, under Xvfb, into docs/images/ (scripts/screenshots_deploy_llm.py).
# Needs: apt-get install xvfb libxcb-cursor0, and llama.cpp (scripts/llama_cpp.sh)
set -euo pipefail
source "$(dirname "$0")/demo_env.sh"
demo_env ember-demo-deploy-llm 96 keep
"$py" -m engine start >/dev/null
SHOTS="${SHOTS:-export,compare,serve}" "$py" scripts/screenshots_deploy_llm.py "$repo/docs/images"
echo "screenshots in docs/images/"
