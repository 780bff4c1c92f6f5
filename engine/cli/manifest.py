"""``ember jobs manifest``: a train.finetune job file as Kubeflow PyTorchJob manifests (docs/kubernetes.md).

It only reads the job file and writes YAML for ``kubectl apply -f``: no engine is started.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.api.job_terms import FINETUNE
from engine.api.pytorchjob import KubernetesOptions, dump, manifest
from engine.api.specs import SpecError, load_job_file


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def cmd_manifest(args: argparse.Namespace) -> int:
    try:
        kind, spec, _ = load_job_file(args.file)
    except SpecError as exc:
        return _fail(f"{exc}\nhint: {exc.hint}")
    if kind != FINETUNE:
        return _fail(f"{args.file} is a {kind} job; a PyTorchJob runs a {FINETUNE} job file")
    given = {"image": args.image, "volume_claim": args.claim, "namespace": args.namespace, "nodes": args.nodes,
             "gpus_per_node": args.gpus_per_node, "cpu": args.cpu, "memory": args.memory}
    try:
        options = KubernetesOptions(**{k: v for k, v in given.items() if v is not None})
        documents = manifest(spec, args.run_name or Path(args.file).stem, options, args.job_name or "")
    except ValidationError as exc:
        return _fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    except ValueError as exc:
        return _fail(str(exc))
    text = dump(documents)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}: kubectl apply -f {args.output}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def add_parser(jobs_sub: Any) -> None:
    m = jobs_sub.add_parser("manifest", help="write a train.finetune job file as a Kubeflow PyTorchJob "
                            "(ConfigMap + PyTorchJob YAML for kubectl apply)")
    m.add_argument("file", help="a job file (kind: train.finetune)")
    m.add_argument("--image", required=True, help="a container image with Ember installed")
    m.add_argument("--claim", required=True, help="the PersistentVolumeClaim every pod writes the run folder to")
    m.add_argument("--nodes", type=int, help="pods (machines), each running distributed.nproc processes; default 1")
    m.add_argument("--gpus-per-node", type=int, help="nvidia.com/gpu per pod; default 0 (CPU)")
    m.add_argument("--namespace", help="default: default")
    m.add_argument("--cpu", help="CPU each pod requests, e.g. 8")
    m.add_argument("--memory", help="memory each pod requests, e.g. 32Gi")
    m.add_argument("--run-name", help="the run's folder on the claim (runs/NAME); default: the file's name")
    m.add_argument("--job-name", help="the PyTorchJob's name; default: from the run name")
    m.add_argument("-o", "--output", help="write the YAML to this file instead of printing it")
    m.set_defaults(fn=cmd_manifest)
