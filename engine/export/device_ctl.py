"""The Jetson side of a deploy: run there as ``python - OP JSON`` with this file's source on stdin.

Like engine/launch/node_ctl.py it uses only the standard library of Python 3.8+, so
nothing has to be installed on the device. Ops: ``files`` (size and sha256 of the
bundle's files already there), ``prepare`` (make the folder and remove its manifest,
so a bundle being updated is never taken as complete), ``trtexec`` (where the
bundle's scripts will find trtexec, and its banner with the TensorRT version).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def files(a):
    """{rel: [size, sha256]} of each file in dir (None when missing); hashed only when the size matches."""
    out = {}
    for rel, size in a["files"].items():
        path = os.path.join(a["dir"], rel)
        try:
            have = os.path.getsize(path) if os.path.isfile(path) else None
        except OSError:
            have = None
        out[rel] = None if have is None else [have, _sha256(path) if size is None or have == size else None]
    return out


def prepare(a):
    """Make the folder, drop its manifest (the bundle is incomplete from now on), report what is there."""
    d = os.path.abspath(os.path.expanduser(a["dir"]))
    os.makedirs(d, exist_ok=True)
    try:
        os.remove(os.path.join(d, "manifest.json"))
    except FileNotFoundError:
        pass
    return {"dir": d, "files": files(dict(a, dir=d))}


def trtexec(a):
    """trtexec as the bundle's scripts find it: $TRTEXEC, then PATH + /usr/src/tensorrt/bin + this Python's dir."""
    extra = ["/usr/src/tensorrt/bin", os.path.dirname(sys.executable)]
    search = os.pathsep.join([os.environ.get("PATH", "")] + extra)
    path = os.environ.get("TRTEXEC") or shutil.which("trtexec", path=search)
    out = {"path": path, "banner": None, "error": None}
    if not path:
        return out
    try:
        run = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        text = run.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError) as exc:
        out["error"] = str(exc)
        return out
    for line in text.splitlines():
        if line.startswith("&&&& RUNNING"):
            out["banner"] = line.strip()
            break
    if out["banner"] is None:
        out["error"] = (text.strip().splitlines() or ["no output"])[-1][:300]
    return out


OPS = {"files": files, "prepare": prepare, "trtexec": trtexec}

if __name__ == "__main__":
    sys.stdout.write(json.dumps(OPS[sys.argv[1]](json.loads(sys.argv[2]))) + "\n")
