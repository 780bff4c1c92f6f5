"""Atomic, verifiable training checkpoints.

Layout: ``<run>/checkpoints/step-00000050/`` holding the model and optimizer
state (``state.pt``; ``dcp/`` for sharded FSDP; ``deepspeed/`` for ZeRO), the scheduler
and scaler (``trainer.pt``), each rank's RNG state, ``trainer_state.json`` (step,
data position, best metric) and ``manifest.json`` (size and sha256 of every
file). Everything is written to a hidden temporary dir, fsynced, renamed, and
only then does ``latest`` (itself replaced atomically) point at it. A torn or
corrupt checkpoint fails verification and the previous one is used. A save that
fails (a full disk) removes its temporary dir, so the space is free again and the
previous checkpoint stays ``latest``.

Test hook: ``EMBER_FAULT_CHECKPOINT_DELAY_S`` makes rank 0 sleep that long after the
files are written and before the manifest and rename, so fault tests (tests/faults) can
kill a job mid-save reliably. Unset, it costs nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.training import dist

LATEST = "latest"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def _first_failure() -> Iterator[None]:
    """torch.distributed.checkpoint gathers every rank's failure into a CheckpointException, a BaseException
    that ``except Exception`` (the recipe's report of any failure) lets through: raise the first rank's own
    exception instead (a full disk stays an OSError, a missing tensor a RuntimeError)."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as exc:
        failures = [f[0] if isinstance(f, tuple) else f for _, f in sorted(exc.failures.items())]
        first = next((f for f in failures if isinstance(f, Exception)), None)
        if first is None:
            raise RuntimeError(str(exc)) from None
        raise first from None


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def unwrap(model: Any) -> Any:
    """The plain module inside a DDP wrapper."""
    return getattr(model, "module", model)


def _plain_state(model: Any, trainable_only: bool) -> dict[str, Any]:
    plain = unwrap(model)
    sd = plain.state_dict()
    if trainable_only:
        # Adapters (and heads) only: the frozen base comes from the model source on load.
        keep = {n for n, p in plain.named_parameters() if p.requires_grad}
        keep |= {n for n, _ in plain.named_buffers()}
        sd = {k: v for k, v in sd.items() if k in keep}
    return sd


FAULT_DELAY_ENV = "EMBER_FAULT_CHECKPOINT_DELAY_S"


def save(root: Path, step: int, model: Any, optimizer: Any, trainer_objs: dict[str, Any],
         trainer_state: dict[str, Any], world: dist.World, layout: str, trainable_only: bool,
         keep: int) -> Path:
    """Write checkpoint ``step`` atomically on every rank; returns its final path.

    A failure leaves no temporary dir behind; a full disk is raised as a JobFailed that names
    the disk and its free space.
    """
    from engine.training.context import disk_full

    name = f"step-{step:08d}"
    try:
        return _save(root, name, step, model, optimizer, trainer_objs, trainer_state, world, layout,
                     trainable_only, keep)
    except Exception as exc:
        if world.is_main:
            shutil.rmtree(root / f".{name}.tmp", ignore_errors=True)
        full = disk_full(exc, root, f"writing checkpoint {name}")
        if full is not None:
            raise full from exc
        raise


def _save(root: Path, name: str, step: int, model: Any, optimizer: Any, trainer_objs: dict[str, Any],
          trainer_state: dict[str, Any], world: dist.World, layout: str, trainable_only: bool,
          keep: int) -> Path:
    import torch

    tmp, final = root / f".{name}.tmp", root / name
    if world.is_main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier(world)
    if layout == "deepspeed":
        # DeepSpeed writes its own partitioned model and optimizer files from every rank.
        model.save_checkpoint(str(tmp / "deepspeed"), tag="state", save_latest=False)
    elif layout == "dcp":
        # FSDP2: each rank writes its own shards in torch.distributed.checkpoint format.
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer,
                                            options=StateDictOptions(ignore_frozen_params=trainable_only))
        with _first_failure():
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / "dcp"))
    elif world.is_main:
        # Single process and DDP: every rank holds the same state, so rank 0 writes it once.
        torch.save({"model": _plain_state(model, trainable_only), "optim": optimizer.state_dict()},
                   tmp / "state.pt")
    if world.is_main or tmp.is_dir():
        torch.save(rng_state(), tmp / f"rng-{world.rank}.pt")
    # else: this rank runs on another machine than rank 0 (a multi-node run without a shared
    # filesystem); the checkpoint lives on rank 0's machine and this rank's RNG is not kept.
    if world.is_main:
        # DeepSpeed keeps the schedule in its own checkpoint.
        objs = {} if layout == "deepspeed" else trainer_objs
        torch.save({k: v.state_dict() for k, v in objs.items() if v is not None}, tmp / "trainer.pt")
        spec = trainer_state.pop("spec", None)
        if spec is not None:
            (tmp / "spec.json").write_text(json.dumps(spec, indent=1))  # what produced these weights
        (tmp / "trainer_state.json").write_text(json.dumps({**trainer_state, "step": step,
                                                            "world_size": world.size, "layout": layout}))
    dist.barrier(world)
    if world.is_main:
        delay = float(os.environ.get(FAULT_DELAY_ENV) or 0)
        if delay > 0:
            time.sleep(delay)  # test hook (see the module docstring): the files are written, nothing is final
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _write_atomic(root / LATEST, name)
        _prune(root, keep)
    dist.barrier(world)
    return final


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def verify(ckpt: Path) -> str | None:
    """None when ``ckpt`` is complete and intact, else what is wrong with it."""
    manifest_file = ckpt / "manifest.json"
    if not manifest_file.is_file():
        return "no manifest.json (the checkpoint was not finished)"
    try:
        manifest = json.loads(manifest_file.read_text())
    except ValueError:
        return "manifest.json is corrupt"
    for rel, meta in manifest.items():
        f = ckpt / rel
        if not f.is_file():
            return f"{rel} is missing"
        if f.stat().st_size != meta["size"] or _sha256(f) != meta["sha256"]:
            return f"{rel} does not match its checksum"
    return None


def find_resumable(root: Path) -> tuple[Path | None, list[str]]:
    """The newest intact checkpoint (``latest`` first), and a note for each one skipped."""
    notes: list[str] = []
    candidates: list[Path] = []
    pointer = root / LATEST
    if pointer.is_file():
        candidates.append(root / pointer.read_text().strip())
    candidates += sorted((p for p in root.glob("step-*") if p.is_dir()), reverse=True)
    seen: set[Path] = set()
    for ckpt in candidates:
        if ckpt in seen:
            continue
        seen.add(ckpt)
        problem = verify(ckpt) if ckpt.is_dir() else "missing"
        if problem is None:
            return ckpt, notes
        notes.append(f"skipped checkpoint {ckpt.name}: {problem}")
    return None, notes


def rng_source(state: dict[str, Any], dp_rank: int) -> int | None:
    """Which saved rank's RNG this data-parallel replica continues with: the first rank of the same replica
    in the saving run's layout (its ``mesh``; a run without one had one replica per process). Every process
    of a tensor-parallel replica must draw the same dropout masks, so they all take the same one. None: the
    saving run had fewer replicas, and this one keeps its seeded RNG."""
    saved = state.get("mesh") or {"dp": state.get("world_size", 1), "tp": 1}
    return dp_rank * saved["tp"] if dp_rank < saved["dp"] else None


# An output head tied to the embeddings is one parameter, whose optimizer state a whole model saves under
# one of its two names; a pipeline's last stage holds the head alone and looks for it under the other.
TIED = ("lm_head.weight", "model.embed_tokens.weight")


def _tied_aliases(state: dict[str, Any], saved: set[str]) -> dict[str, str]:
    """For each optimizer state this model wants but the checkpoint lacks, the tied twin it has instead."""
    def has(name: str) -> bool:
        return any(key.startswith(f"optim.state.{name}.") for key in saved)

    aliases = {}
    for name in state:
        if has(name):
            continue
        for mine, twin in (TIED, TIED[::-1]):
            if name.endswith(mine) and has(other := name[: -len(mine)] + twin) and other not in state:
                aliases[name] = other
    return aliases


def load(ckpt: Path, model: Any, optimizer: Any, trainer_objs: dict[str, Any], world: dist.World,
         trainable_only: bool, dp_rank: int | None = None) -> dict[str, Any]:
    """Restore model, optimizer, scheduler/scaler and this replica's RNG; returns trainer_state.
    ``dp_rank``: this process's data-parallel replica (default: its rank)."""
    import torch

    state = json.loads((ckpt / "trainer_state.json").read_text())
    if state["layout"] == "deepspeed":
        model.load_checkpoint(str(ckpt / "deepspeed"), tag="state", load_module_strict=not trainable_only)
    elif state["layout"] == "dcp":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(ignore_frozen_params=trainable_only, strict=not trainable_only)
        model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
        own = [list(group["params"]) for group in optim_sd.get("param_groups", [])]
        saved = set(dcp.FileSystemReader(str(ckpt / "dcp")).read_metadata().state_dict_metadata)
        aliased = _tied_aliases(optim_sd.get("state", {}), saved)
        for name, alias in aliased.items():
            optim_sd["state"][alias] = optim_sd["state"].pop(name)
        loaded = {"model": model_sd, "optim": optim_sd}
        try:
            with _first_failure():
                dcp.load(loaded, checkpoint_id=str(ckpt / "dcp"))
        except (KeyError, RuntimeError, ValueError) as exc:
            from engine.training.context import JobFailed

            raise JobFailed(f"Checkpoint {ckpt.name} does not fit this run: {str(exc).splitlines()[0]}",
                            "It was written for another model or method (a LoRA run's checkpoint holds only the "
                            "adapters). Resume with the spec it was written with, or start a new run.") from exc
        for name, alias in aliased.items():
            loaded["optim"]["state"][name] = loaded["optim"]["state"].pop(alias)
        # The checkpoint's parameter lists are one rank's: a pipeline stage's when the saving run had stages.
        # This process's own lists are the ones to fill (each parameter's state is saved under its name).
        for group, names in zip(loaded["optim"].get("param_groups", []), own, strict=False):
            group["params"] = names
        set_model_state_dict(model, loaded["model"], options=options)
        set_optimizer_state_dict(model, optimizer, loaded["optim"], options=options)
    else:
        saved = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=False)
        result = unwrap(model).load_state_dict(saved["model"], strict=not trainable_only)
        if result.unexpected_keys:
            raise RuntimeError(f"checkpoint {ckpt.name} does not fit this model: unexpected {result.unexpected_keys[:5]}")
        optimizer.load_state_dict(saved["optim"])
    objs = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False)
    for key, obj in trainer_objs.items():
        if obj is not None and key in objs:
            obj.load_state_dict(objs[key])
    source = rng_source(state, world.rank if dp_rank is None else dp_rank)
    rng_file = ckpt / f"rng-{source}.pt"
    if source is not None and rng_file.is_file():
        set_rng_state(torch.load(rng_file, map_location="cpu", weights_only=False))
    return state
