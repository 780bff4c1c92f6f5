"""Slurm's own commands on a cluster's login node: what the partitions offer, submit, follow, cancel.

Stdlib only and Python 3.8+, like engine/launch/node_ctl.py: the engine sends this
file to the login node's Python on stdin (``python - OP 'JSON'``), or calls the
functions directly when this machine is the login node. Each operation prints one
JSON object; a Slurm command that fails answers ``{"error": ..., "hint": ...}``.

- info: partitions (state, nodes, CPUs, memory, GPUs, time limit, default) from sinfo and scontrol
- submit: write the batch script into the run's folder and ``sbatch --parsable`` it
- state: the job's state, pending reason and place in its partition's queue (squeue), or, once it
  left the queue, how it ended (scontrol, then the exit code the script wrote)
- cancel: ``scancel``: TERM or KILL to the job's steps (a graceful stop, or Cancel), or the job removed
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys

SCRIPT = "slurm.sbatch"
EXIT_FILE = "exit_code"

# squeue's pending reasons, in words (the codes are Slurm's: `man squeue`, JOB REASON CODES).
REASONS = {
    "Resources": "waiting for free nodes, CPUs or GPUs",
    "Priority": "jobs of higher priority are ahead of it",
    "Dependency": "waiting for a job it depends on",
    "BeginTime": "its start time has not come yet",
    "JobHeldUser": "held by its owner (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "QOSMaxJobsPerUserLimit": "you have as many jobs running as your QOS allows",
    "QOSMaxGRESPerUser": "you use as many GPUs as your QOS allows",
    "QOSMaxCpuPerUserLimit": "you use as many CPUs as your QOS allows",
    "QOSGrpCpuLimit": "its QOS group uses all the CPUs it may",
    "QOSGrpGRES": "its QOS group uses all the GPUs it may",
    "AssocMaxJobsLimit": "your account runs as many jobs as it may",
    "AssocGrpCpuLimit": "your account's group uses all the CPUs it may",
    "Reservation": "waiting for its reservation",
    "Licenses": "waiting for a licence",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "no node has what it asks for",
    "InvalidQOS": "its QOS is not valid",
    "InvalidAccount": "its account is not valid",
    "None": "being scheduled",
}


def reason_text(code):
    if not code:
        return ""
    return REASONS.get(code, code)


def _slurm(argv, timeout=30, cwd=None):
    """(rc, stdout, stderr) of a Slurm command; rc 127 when it is not installed here."""
    if shutil.which(argv[0]) is None:
        return 127, "", f"{argv[0]} not found"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {timeout} s"
    return proc.returncode, proc.stdout, proc.stderr


def _failed(argv, rc, err):
    if rc == 127:
        return {"error": f"{argv[0]} is not installed on this machine",
                "hint": "Pick the cluster's login node (a machine where sinfo and sbatch work)."}
    lines = [ln for ln in err.strip().splitlines() if ln.strip()] or [f"exit code {rc}"]
    return {"error": f"{' '.join(argv[:2])} failed: {lines[-1].replace('sbatch: error: ', '')}",
            "hint": "Check the partition, account and QOS with the cluster's administrator (sinfo, sacctmgr)."}


def _minutes(limit):
    """Slurm's time format ([D-]HH:MM:SS, MM:SS, MM, UNLIMITED) in minutes; None for no limit."""
    limit = (limit or "").strip()
    if not limit or limit in ("UNLIMITED", "infinite", "NONE", "n/a"):
        return None
    days = 0
    if "-" in limit:
        d, limit = limit.split("-", 1)
        days = int(d)
    parts = [int(p) for p in limit.split(":")]
    if len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2 and days:
        h, m, s = parts[0], parts[1], 0
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = 0, parts[0], 0
    return days * 1440 + h * 60 + m + (1 if s else 0)


def _gpus(gres):
    """GPUs per node from a GRES string such as 'gpu:a100:4(S:0-1),shard:8' (0 when none)."""
    total = 0
    for item in (gres or "").split(","):
        fields = item.split("(")[0].split(":")
        if fields and fields[0] == "gpu":
            try:
                total += int(fields[-1])
            except ValueError:
                total += 1
    return total


def info(args):
    fmt = "%P|%a|%D|%c|%m|%G|%l|%T"
    argv = ["sinfo", "-h", "-e", "-o", fmt]
    rc, out, err = _slurm(argv)
    if rc != 0:
        return _failed(argv, rc, err)
    parts = {}
    for line in out.splitlines():
        cells = line.split("|")
        if len(cells) != 8:
            continue
        name, avail, nodes, cpus, mem, gres, limit, state = cells
        default = name.endswith("*")
        name = name.rstrip("*")
        part = parts.setdefault(name, {"name": name, "default": default, "up": avail == "up", "nodes": 0,
                                       "idle_nodes": 0, "cpus_per_node": 0, "memory_mb_per_node": 0,
                                       "gpus_per_node": 0, "max_minutes": _minutes(limit)})
        count = int(nodes) if nodes.isdigit() else 0
        part["nodes"] += count
        if state.startswith("idle"):
            part["idle_nodes"] += count
        part["cpus_per_node"] = max(part["cpus_per_node"], int(cpus.rstrip("+")) if cpus.rstrip("+").isdigit() else 0)
        part["memory_mb_per_node"] = max(part["memory_mb_per_node"],
                                         int(mem.rstrip("+")) if mem.rstrip("+").isdigit() else 0)
        part["gpus_per_node"] = max(part["gpus_per_node"], _gpus(gres))
    rc, version, _ = _slurm(["sinfo", "--version"])
    return {"partitions": list(parts.values()), "version": version.strip() if rc == 0 else "",
            "user": getpass.getuser()}


def submit(args):
    node_dir = os.path.abspath(os.path.expanduser(args["dir"]))
    os.makedirs(node_dir, exist_ok=True)
    for name, text in (args.get("files") or {}).items():
        with open(os.path.join(node_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
    try:
        os.remove(os.path.join(node_dir, EXIT_FILE))
    except OSError:
        pass
    script = os.path.join(node_dir, SCRIPT)
    with open(script, "w", encoding="utf-8") as f:
        f.write(args["script"])
    argv = ["sbatch", "--parsable", script]
    rc, out, err = _slurm(argv, timeout=60, cwd=node_dir)  # the job's working folder
    if rc != 0:
        return _failed(argv, rc, err)
    job_id = out.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"
    return {"job_id": job_id, "dir": node_dir, "script": script}


def _queue_position(job_id, partition):
    """1-based place among the partition's pending jobs in the order Slurm will consider them."""
    argv = ["squeue", "-h", "-t", "PD", "-o", "%i", "--sort=-p,i"]
    if partition:
        argv += ["-p", partition]
    rc, out, _ = _slurm(argv)
    if rc != 0:
        return None
    ids = [line.strip() for line in out.splitlines() if line.strip()]
    return ids.index(job_id) + 1 if job_id in ids else None


def _scontrol_job(job_id):
    rc, out, _ = _slurm(["scontrol", "show", "job", "-o", job_id])
    if rc != 0:
        return {}
    fields = {}
    for token in out.split():
        if "=" in token:
            key, value = token.split("=", 1)
            fields.setdefault(key, value)
    return fields


def state(args):
    job_id = str(args["job_id"])
    node_dir = os.path.abspath(os.path.expanduser(args["dir"]))
    argv = ["squeue", "-h", "-j", job_id, "-o", "%T|%r|%P|%N|%M|%l"]
    rc, out, err = _slurm(argv)
    line = out.strip().splitlines()[0] if rc == 0 and out.strip() else ""
    exit_code = None
    try:
        with open(os.path.join(node_dir, EXIT_FILE), encoding="utf-8") as f:
            text = f.read().strip()
            exit_code = int(text) if text.lstrip("-").isdigit() else None
    except OSError:
        pass
    if line:
        job_state, reason, partition, nodes, elapsed, limit = (line.split("|") + [""] * 6)[:6]
        result = {"state": job_state, "reason": reason if job_state == "PENDING" else "",
                  "reason_text": reason_text(reason) if job_state == "PENDING" else "",
                  "partition": partition, "nodelist": nodes, "elapsed": elapsed, "time_limit": limit,
                  "ended": False, "exit_code": None}
        if job_state == "PENDING":
            result["position"] = _queue_position(job_id, partition)
        return result
    if rc != 0 and "Invalid job id" not in err:
        return _failed(argv, rc, err)
    # Left the queue: how it ended (scontrol keeps it for MinJobAge), and the exit code the script wrote.
    fields = _scontrol_job(job_id)
    final = fields.get("JobState", "COMPLETED" if exit_code == 0 else "UNKNOWN")
    if exit_code is None:
        code = fields.get("ExitCode", "")
        rc_text, _, sig = code.partition(":")
        exit_code = -int(sig) if sig.isdigit() and int(sig) else int(rc_text) if rc_text.isdigit() else -9
    return {"state": final, "reason": fields.get("Reason", ""), "reason_text": "", "ended": True,
            "exit_code": exit_code, "nodelist": fields.get("NodeList", "")}


def cancel(args):
    """TERM: to the job's steps only (a graceful stop: the ranks save a checkpoint), not its batch shell,
    which lives on to record the exit code. Anything else: ``scancel`` the whole job; Slurm itself sends
    TERM first and KILL after the cluster's KillWait (a KILL asked for with --signal goes the same way)."""
    argv = ["scancel"] + (["--signal=TERM"] if args.get("sig") == "TERM" else []) + [str(args["job_id"])]
    rc, _out, err = _slurm(argv)
    if rc != 0 and "already completing or completed" not in err:
        return _failed(argv, rc, err)
    return {"cancelled": True}


OPS = {"slurm_info": info, "slurm_submit": submit, "slurm_state": state, "slurm_cancel": cancel}


def main(argv):
    op = argv[0] if argv else ""
    if op not in OPS:
        sys.stdout.write(json.dumps({"error": f"unknown operation {op!r}; one of {sorted(OPS)}"}) + "\n")
        return 2
    sys.stdout.write(json.dumps(OPS[op](json.loads(argv[1]) if len(argv) > 1 else {})) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
