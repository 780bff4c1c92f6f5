"""A fine-tune as a Kubeflow training-operator ``PyTorchJob`` (kubeflow.org/v1): what ``kubectl apply -f`` takes.

One pod per machine: the Master (node rank 0, it hosts the rendezvous) and ``nodes - 1`` Workers, each
running torchrun with ``distributed.nproc`` processes. The operator gives every pod the variables torchrun
reads (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE from ``spec.nprocPerNode``, PET_MASTER_ADDR and
PET_MASTER_PORT of the Master's service), so the command names no address. The spec travels in a
ConfigMap mounted at /spec; the run's folder is on a PersistentVolumeClaim every pod mounts, because every
rank writes checkpoints into it (docs/kubernetes.md). Imports only pydantic and yaml: the GUI may use it.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from engine.api.job_terms import FINETUNE
from engine.api.specs import dump_job_yaml
from engine.api.train_spec import TrainSpec

# Kubernetes' own name rules (k8s.io/apimachinery/pkg/util/validation).
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # DNS-1123 label: namespaces
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # claims, secrets
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # the training operator's rule for a job's name
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][0-9]+)?")

MANAGED_BY = {"app.kubernetes.io/managed-by": "ember-studio"}
RUN_LABEL = "ember-studio/run"
CONTAINER = "pytorch"  # the operator finds the training container by this name
SPEC_DIR = "/spec"
STOP_GRACE_S = 120  # as on Slurm (engine/launch/slurm.py): time to save a checkpoint after TERM


def _name(value: str, what: str, pattern: re.Pattern[str], limit: int, rule: str) -> str:
    if len(value) > limit or not pattern.fullmatch(value):
        raise ValueError(f"{what} {value!r} is not a Kubernetes name: {rule}, at most {limit} characters")
    return value


_LOWER = "lowercase letters, digits and '-', starting and ending with a letter or digit"


class KubernetesOptions(BaseModel):
    """Where and how the PyTorchJob runs on the cluster: the spec itself says what is trained."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(..., min_length=1, max_length=1024, description="a container image with Ember installed")
    namespace: str = "default"
    nodes: int = Field(1, ge=1, le=1024, description="pods: one Master and nodes-1 Workers")
    gpus_per_node: int = Field(0, ge=0, le=64, description="nvidia.com/gpu per pod; 0: a CPU run")
    cpu: str | None = Field(None, description="CPU cores each pod requests, e.g. 8 or 7500m")
    memory: str | None = Field(None, description="memory each pod requests, e.g. 32Gi")
    volume_claim: str = Field(..., description="the PersistentVolumeClaim that holds the run folders")
    mount_path: str = Field("/ember", description="where every pod mounts the claim; runs go in <it>/runs")
    service_account: str | None = None
    image_pull_secret: str | None = None
    restart_policy: Literal["Always", "OnFailure", "Never", "ExitCode"] = "OnFailure"
    backoff_limit: int | None = Field(None, ge=0, le=2**31 - 1, description="retries before the job fails")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if any(c.isspace() for c in value):
            raise ValueError(f"image {value!r} contains a space: give a reference such as "
                             "registry.example.com/ember:1.0")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _name(value, "namespace", _LABEL, 63, _LOWER)

    @field_validator("volume_claim", "service_account", "image_pull_secret")
    @classmethod
    def _object_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        rule = _LOWER + ", in parts joined by '.'"
        return None if value is None else _name(value, info.field_name, _SUBDOMAIN, 253, rule)

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not _QUANTITY.fullmatch(value):
            raise ValueError(f"{info.field_name} {value!r} is not a Kubernetes quantity: a number with an "
                             "optional suffix, e.g. 8, 500m, 32Gi")
        return value

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        path = PurePosixPath(value)
        if not path.is_absolute() or ":" in value or ".." in path.parts or str(path) == "/":
            raise ValueError(f"mount_path {value!r} must be an absolute folder other than / (no ':' or '..'), "
                             "e.g. /ember")
        if any(path == PurePosixPath(p) or PurePosixPath(p) in path.parents for p in (SPEC_DIR, "/dev/shm")):
            raise ValueError(f"mount_path {value!r} would hide {SPEC_DIR} or /dev/shm: pick another folder")
        return str(path)


def _refusals(spec: TrainSpec, options: KubernetesOptions) -> list[str]:
    """Why the spec cannot run as these pods, each with what to change."""
    d, gpus = spec.distributed, options.gpus_per_node
    problems = []
    if d.nodes or d.slurm is not None:
        what = "distributed.nodes" if d.nodes else "distributed.slurm"
        problems.append(f"{what} places the run on other machines; on Kubernetes the pods are the machines: "
                        "remove it and set the nodes option (--nodes)")
    if spec.device == "cuda" and not gpus:
        problems.append("device cuda needs GPUs in the pods: set gpus_per_node (--gpus-per-node), or device "
                        "auto or cpu")
    if gpus and d.nproc > gpus:
        problems.append(f"distributed.nproc {d.nproc} is more than gpus_per_node {gpus} (one process per GPU): "
                        f"set nproc to {gpus} or fewer, or ask for more GPUs")
    # TrainSpec checked these for nproc processes; more pods make more data-parallel replicas.
    world, split = options.nodes * d.nproc, d.tensor_parallel * d.pipeline_parallel
    if d.strategy == "single" and world // split > 1:
        problems.append(f"{world} processes (nodes {options.nodes} x nproc {d.nproc}) need strategy ddp, fsdp "
                        "or deepspeed: set distributed.strategy, or nodes 1 and nproc 1")
    if d.strategy == "ddp" and split > 1 and world // split > 1:
        problems.append("data parallel beside tensor_parallel or pipeline_parallel uses FSDP2 (DDP does not "
                        "take split models): set strategy fsdp")
    return problems


def job_name_for(run_name: str) -> str:
    """The PyTorchJob's default name: the run's name made a DNS-1035 label (lowercase, '-', a letter first)."""
    name = re.sub(r"[^a-z0-9-]", "-", run_name.lower()).strip("-")
    return name if name[:1].isalpha() else f"run-{name}"


def manifest(spec: TrainSpec, run_name: str, options: KubernetesOptions, job_name: str = "") -> list[dict]:
    """The documents to apply: a ConfigMap holding spec.yaml, then the PyTorchJob that runs it.

    The run's folder is ``<mount_path>/runs/<run_name>`` on the claim; applying again with the same run
    name and ``resume: true`` continues from the latest checkpoint there. Raises ValueError for what
    cannot run, saying what to change.
    """
    if len(run_name) > 63 or not _LABEL_VALUE.fullmatch(run_name):
        raise ValueError(f"run name {run_name!r} names the run's folder and labels its pods: letters, digits, "
                         "'-', '_' and '.', starting and ending with a letter or digit, at most 63 characters")
    job_name = job_name or job_name_for(run_name)
    # The operator names each pod and its service <job>-worker-<index>; Kubernetes allows 63 characters.
    longest = f"-worker-{max(options.nodes - 2, 0)}"
    _name(job_name, "job name", _DNS1035, 63 - len(longest), "lowercase letters, digits and '-', starting "
          f"with a letter, short enough for its pod names (<name>{longest})")
    problems = _refusals(spec, options)
    if problems:
        raise ValueError("; ".join(problems))

    labels = {**MANAGED_BY, RUN_LABEL: run_name}
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": f"{job_name}-spec", "namespace": options.namespace, "labels": labels},
              "data": {"spec.yaml": dump_job_yaml(FINETUNE, spec, run_name)}}
    replicas = {"Master": 1, "Worker": options.nodes - 1}
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": job_name, "namespace": options.namespace, "labels": dict(labels)},
        "spec": {
            "nprocPerNode": str(spec.distributed.nproc),  # a string in the CRD: it also takes auto, cpu, gpu
            "pytorchReplicaSpecs": {role: {"replicas": n, "restartPolicy": options.restart_policy,
                                           "template": _pod_template(spec, run_name, options,
                                                                     config["metadata"]["name"], labels)}
                                    for role, n in replicas.items() if n},
        },
    }
    if options.backoff_limit is not None:
        job["spec"]["runPolicy"] = {"backoffLimit": options.backoff_limit}
    return [config, job]


def _pod_template(spec: TrainSpec, run_name: str, options: KubernetesOptions, config_map: str,
                  labels: dict[str, str]) -> dict[str, Any]:
    torchrun = ["python", "-m", "torch.distributed.run"]
    if spec.distributed.max_restarts:
        torchrun.append(f"--max-restarts={spec.distributed.max_restarts}")
    command = [*torchrun, "-m", "engine.recipes.finetune", "--config", f"{SPEC_DIR}/spec.yaml",
               "--run-dir", f"{options.mount_path}/runs/{run_name}"]
    resources: dict[str, Any] = {}
    requests = {k: v for k, v in (("cpu", options.cpu), ("memory", options.memory)) if v is not None}
    if requests:
        resources["requests"] = requests
    if options.gpus_per_node:
        resources["limits"] = {"nvidia.com/gpu": options.gpus_per_node}
    container = {
        "name": CONTAINER, "image": options.image, "command": command,
        "volumeMounts": [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
                         {"name": "runs", "mountPath": options.mount_path},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
        **({"resources": resources} if resources else {}),
    }
    pod: dict[str, Any] = {
        # Deleting the job (or a node drain) sends TERM: the run finishes its step and writes a checkpoint,
        # which on a large model takes longer than Kubernetes' default 30 s before KILL.
        "terminationGracePeriodSeconds": STOP_GRACE_S,
        "containers": [container],
        "volumes": [{"name": "spec", "configMap": {"name": config_map}},
                    {"name": "runs", "persistentVolumeClaim": {"claimName": options.volume_claim}},
                    # A container's default /dev/shm is 64 MB: NCCL and DataLoader workers need more.
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    if options.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": options.image_pull_secret}]
    return {"metadata": {"labels": dict(labels)}, "spec": pod}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # each document spelled out in full: no &id001 anchors for kubectl's readers


# spec.yaml inside the ConfigMap stays readable as a block, not one quoted line of \n escapes.
_Dumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def dump(documents: list[dict]) -> str:
    """The documents as one multi-document YAML file, each starting with ``---``."""
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, explicit_start=True)
