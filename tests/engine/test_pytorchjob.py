"""Kubeflow PyTorchJob manifests, checked against the training operator's own CRD schema
(tests/fixtures/kubeflow, copied unchanged from kubeflow/training-operator v1.9.0)."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from engine.api.job_terms import FINETUNE
from engine.api.pytorchjob import KubernetesOptions, dump, job_name_for, manifest
from engine.api.specs import dump_job_yaml
from engine.api.train_spec import TrainSpec
from engine.cli.main import main as ember

CRD = Path(__file__).resolve().parent.parent / "fixtures" / "kubeflow" / "kubeflow.org_pytorchjobs.yaml"
IMAGE = "registry.example.com/ember:1.0"


def _closed(schema):
    """The schema with unknown fields refused, as kubectl's default strict field validation does
    (jsonschema would let a misspelt field through; the API server rejects it)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def validator():
    crd = yaml.load(CRD.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    served = [v for v in crd["spec"]["versions"] if v["served"]]
    assert [v["name"] for v in served] == ["v1"]
    schema = _closed(served[0]["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    formats = jsonschema.FormatChecker()
    # Kubernetes' int32 fields (replicas, backoffLimit) reject larger numbers; jsonschema knows no int32.
    formats.checks("int32")(lambda v: not isinstance(v, int) or -2**31 <= v < 2**31)
    return jsonschema.Draft7Validator(schema, format_checker=formats)


def schema_errors(validator, job):
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(job)]


def build(spec=None, run="tune-1", **options):
    spec = TrainSpec.model_validate(spec or {})
    config, job = manifest(spec, run, KubernetesOptions(image=IMAGE, volume_claim="ember-runs", **options))
    return spec, config, job


def pod(job, role="Master"):
    return job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]


def test_one_cpu_node_fits_the_crd(validator):
    spec, config, job = build()
    assert schema_errors(validator, job) == []
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("kubeflow.org/v1", "PyTorchJob", "tune-1")
    assert job["spec"]["nprocPerNode"] == "1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"] and replicas["Master"]["replicas"] == 1
    assert replicas["Master"]["restartPolicy"] == "OnFailure"
    (container,) = pod(job)["containers"]
    assert container["name"] == "pytorch" and container["image"] == IMAGE
    assert container["command"] == ["python", "-m", "torch.distributed.run", "-m", "engine.recipes.finetune",
                                    "--config", "/spec/spec.yaml", "--run-dir", "/ember/runs/tune-1"]
    assert "resources" not in container  # a CPU run asks for no GPU
    assert pod(job)["terminationGracePeriodSeconds"] == 120  # time to write a checkpoint after TERM
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]} == \
        {"spec": "/spec", "runs": "/ember", "dshm": "/dev/shm"}
    assert pod(job)["volumes"] == [{"name": "spec", "configMap": {"name": "tune-1-spec"}},
                                   {"name": "runs", "persistentVolumeClaim": {"claimName": "ember-runs"}},
                                   {"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    labels = {"app.kubernetes.io/managed-by": "ember-studio", "ember-studio/run": "tune-1"}
    for metadata in (config["metadata"], job["metadata"], job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]):
        assert metadata["labels"] == labels
    assert (config["kind"], config["metadata"]["name"], config["metadata"]["namespace"]) == \
        ("ConfigMap", "tune-1-spec", "default")
    doc = yaml.safe_load(config["data"]["spec.yaml"])
    assert doc["kind"] == FINETUNE and TrainSpec.model_validate(doc["spec"]) == spec


def test_four_nodes_of_eight_gpus_fit_the_crd(validator):
    spec, config, job = build({"task": "causal_lm", "device": "cuda",
                               "distributed": {"strategy": "fsdp", "nproc": 8, "max_restarts": 2}},
                              run="llama_ft.1", nodes=4, gpus_per_node=8, cpu="32", memory="256Gi", namespace="ml",
                              service_account="trainer", image_pull_secret="registry-key", backoff_limit=3)
    assert schema_errors(validator, job) == []
    assert job["metadata"] == {"name": "llama-ft-1", "namespace": "ml",
                               "labels": {"app.kubernetes.io/managed-by": "ember-studio", "ember-studio/run": "llama_ft.1"}}
    assert job["spec"]["nprocPerNode"] == "8" and job["spec"]["runPolicy"] == {"backoffLimit": 3}
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    for role in ("Master", "Worker"):
        (container,) = pod(job, role)["containers"]
        assert container["name"] == "pytorch"
        assert container["resources"] == {"requests": {"cpu": "32", "memory": "256Gi"},
                                          "limits": {"nvidia.com/gpu": 8}}
        assert container["command"][3:] == ["--max-restarts=2", "-m", "engine.recipes.finetune", "--config",
                                            "/spec/spec.yaml", "--run-dir", "/ember/runs/llama_ft.1"]
        assert pod(job, role)["serviceAccountName"] == "trainer"
        assert pod(job, role)["imagePullSecrets"] == [{"name": "registry-key"}]
    assert config["metadata"]["namespace"] == "ml"
    assert TrainSpec.model_validate(yaml.safe_load(config["data"]["spec.yaml"])["spec"]) == spec


@pytest.mark.parametrize("break_it", [
    lambda job: job["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="3"),
    lambda job: job["spec"].update(nprocPerNode=8),
    lambda job: job["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=2**31),
    lambda job: pod(job)["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "eight"}),
    lambda job: pod(job)["containers"][0].update(ports=[{"name": "pytorchjob-port", "containerPort": "23456"}]),
    lambda job: pod(job)["containers"][0].update(volumeMount=[]),  # misspelt: kubectl refuses unknown fields
])
def test_the_schema_check_fails_a_broken_manifest(validator, break_it):
    _, _, job = build({"distributed": {"strategy": "ddp", "nproc": 2}}, nodes=2, gpus_per_node=2)
    broken = copy.deepcopy(job)
    break_it(broken)
    assert schema_errors(validator, job) == [] and schema_errors(validator, broken) != []


@pytest.mark.parametrize("spec, options, message", [
    ({"device": "cuda"}, {}, "device cuda needs GPUs in the pods: set gpus_per_node"),
    ({"distributed": {"strategy": "ddp", "nproc": 4}}, {"gpus_per_node": 2},
     "distributed.nproc 4 is more than gpus_per_node 2 (one process per GPU)"),
    ({"distributed": {"strategy": "ddp", "nodes": [{"host": "gpu1", "nproc": 2}]}}, {},
     "distributed.nodes places the run on other machines; on Kubernetes the pods are the machines"),
    ({"distributed": {"slurm": {"cluster": "login"}}}, {}, "distributed.slurm places the run on other machines"),
    ({}, {"nodes": 2}, "2 processes (nodes 2 x nproc 1) need strategy ddp, fsdp or deepspeed"),
    ({"task": "causal_lm", "distributed": {"strategy": "ddp", "nproc": 2, "tensor_parallel": 2}}, {"nodes": 2},
     "data parallel beside tensor_parallel or pipeline_parallel uses FSDP2"),
])
def test_what_cannot_run_is_refused_with_what_to_change(spec, options, message):
    with pytest.raises(ValueError) as refused:
        build(spec, **options)
    assert message in str(refused.value)


def test_one_model_split_over_a_pods_processes_needs_no_data_parallel_strategy(validator):
    _, _, job = build({"task": "causal_lm", "distributed": {"nproc": 2, "tensor_parallel": 2}}, gpus_per_node=2)
    assert schema_errors(validator, job) == [] and job["spec"]["nprocPerNode"] == "2"


@pytest.mark.parametrize("options, message", [
    ({"namespace": "Team_A"}, "namespace 'Team_A' is not a Kubernetes name"),
    ({"volume_claim": "my claim"}, "volume_claim 'my claim' is not a Kubernetes name"),
    ({"cpu": "lots"}, "cpu 'lots' is not a Kubernetes quantity"),
    ({"mount_path": "ember"}, "must be an absolute folder"),
    ({"mount_path": "/dev/shm/runs"}, "would hide /spec or /dev/shm"),
    ({"restart_policy": "Sometimes"}, "'Always', 'OnFailure', 'Never' or 'ExitCode'"),
    ({"nodes": 0}, "greater than or equal to 1"),
])
def test_options_are_checked_as_kubernetes_checks_names(options, message):
    with pytest.raises(ValidationError) as refused:
        KubernetesOptions(**{"image": IMAGE, "volume_claim": "runs", **options})
    assert message in str(refused.value)


def test_run_and_job_names():
    assert (job_name_for("llama_ft.1"), job_name_for("7b-run")) == ("llama-ft-1", "run-7b-run")
    with pytest.raises(ValueError, match="run name 'a/b' names the run's folder"):
        build(run="a/b")
    with pytest.raises(ValueError, match="job name 'x{60}' is not a Kubernetes name"):
        manifest(TrainSpec(), "tune", KubernetesOptions(image=IMAGE, volume_claim="runs"), job_name="x" * 60)


def test_dump_is_multi_document_yaml():
    _, config, job = build(nodes=2, gpus_per_node=1, memory="8Gi",
                           spec={"distributed": {"strategy": "ddp"}})
    text = dump([config, job])
    assert text.startswith("---\n") and "\n---\n" in text and "&id" not in text
    assert list(yaml.safe_load_all(text)) == [config, job]
    assert "spec.yaml: |" in text  # the spec reads as a block, not one escaped line


def _job_file(tmp_path, spec=None):
    path = tmp_path / "tune.yaml"
    path.write_text(dump_job_yaml(FINETUNE, spec or TrainSpec(distributed={"strategy": "ddp"})), encoding="utf-8")
    return path


def test_cli_writes_the_manifest(tmp_path, capsys, validator):
    out = tmp_path / "job.yaml"
    args = ["jobs", "manifest", str(_job_file(tmp_path)), "--image", IMAGE, "--claim", "ember-runs",
            "--nodes", "2", "--gpus-per-node", "1", "--namespace", "ml", "--memory", "16Gi"]
    assert ember([*args, "-o", str(out)]) == 0
    config, job = yaml.safe_load_all(out.read_text(encoding="utf-8"))
    assert schema_errors(validator, job) == []
    assert job["metadata"]["name"] == "tune" and job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert config["metadata"]["namespace"] == "ml"
    assert f"kubectl apply -f {out}" in capsys.readouterr().err
    assert ember(args) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == [config, job]


def test_cli_refuses_what_cannot_run(tmp_path, capsys):
    probe = tmp_path / "probe.yaml"
    probe.write_text("kind: system.probe\nspec: {}\n", encoding="utf-8")
    assert ember(["jobs", "manifest", str(probe), "--image", IMAGE, "--claim", "runs"]) == 2
    assert "is a system.probe job; a PyTorchJob runs a train.finetune job file" in capsys.readouterr().err
    tune = _job_file(tmp_path, spec=TrainSpec(device="cuda"))
    assert ember(["jobs", "manifest", str(tune), "--image", IMAGE, "--claim", "runs"]) == 2
    assert "device cuda needs GPUs in the pods" in capsys.readouterr().err
    assert ember(["jobs", "manifest", str(tune), "--image", IMAGE, "--claim", "Runs!"]) == 2
    assert "volume_claim: Value error, volume_claim 'Runs!' is not a Kubernetes name" in capsys.readouterr().err
