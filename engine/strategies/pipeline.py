"""Pipeline parallelism of a Llama-style decoder with torch.distributed.pipelining.

The decoder's layers are cut into contiguous stages balanced by parameter count, or by each part's forward and
backward time measured on the first process (``pipeline_split: time``; the first stage also holds
the embeddings, the last the final norm and the output head). With ``gpipe`` and ``1f1b`` each of the
``pp`` processes holds one stage; ``interleaved_1f1b`` gives each two (stage s on process s % pp), which
shrinks the bubble. Each process keeps one copy of the model with only its stages' modules left in it,
under their original names, so optimizer state and distributed checkpoints name every tensor as a single
process does and a checkpoint resumes on any other layout.

Batches are padded to ``data.max_length`` and to ``batch_size`` rows (rows of padding learn nothing; an
evaluation's last batch is often short): the stages exchange activations of the shape the first step had. Padding is on the right and attention causal, so the real tokens'
outputs are the unpadded batch's. An output head tied to the embeddings is kept on the first and the last
stage, its two gradients summed after each backward pass so both copies take the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.training.pipeline_split import bubble, split, stage_costs, stages_per_process

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}
IGNORE = -100


def measure(model: Any, rows: int, length: int, device: Any, repeats: int = 3) -> tuple[float, list[float], float]:
    """Seconds of a forward and backward pass of one micro-batch (``rows`` x ``length`` tokens) through the
    embeddings, each decoder layer, and the norm with the head: the costs a split by time balances. The
    head's matrix (hidden x vocabulary) is slow where the embeddings' lookup is quick, though both hold the
    same parameters; each part's median of ``repeats`` runs after one warm-up."""
    import time

    import torch

    core = core_of(model)
    body = core.model
    ids = torch.randint(0, body.embed_tokens.num_embeddings, (rows, length), device=device)
    positions = torch.arange(length, device=device).unsqueeze(0)
    with torch.no_grad():
        hidden = body.embed_tokens(ids)
        rotary = body.rotary_emb(hidden, position_ids=positions)

    def timed(fn: Any) -> float:
        runs = []
        for _ in range(repeats + 1):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            fn().float().sum().backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            runs.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
        return sorted(runs[1:])[len(runs[1:]) // 2]

    x = hidden.detach().requires_grad_(True)
    first = timed(lambda: body.embed_tokens(ids))

    def through(layer: Any) -> Any:
        out = layer(x, attention_mask=None, position_ids=positions, position_embeddings=rotary)
        return out[0] if isinstance(out, tuple) else out  # older transformers return (hidden, ...)

    layers = [timed(lambda layer=layer: through(layer)) for layer in body.layers]
    last = timed(lambda: core.lm_head(body.norm(x)))
    return first, layers, last


def core_of(model: Any) -> Any:
    """The causal LM itself (inside a peft wrapper when there is one): ``.model`` (embeddings, layers, norm,
    rotary embedding) and ``.lm_head``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def problems(model: Any, pp: int, schedule: str) -> list[str]:
    from engine.strategies.tensor_parallel import ARCHITECTURES, config_of

    kind = getattr(config_of(model), "model_type", None)
    if kind not in ARCHITECTURES:
        return [f"pipeline parallelism supports Llama-style models ({', '.join(ARCHITECTURES)}); this model is "
                f"{kind or type(model).__name__}: set distributed.pipeline_parallel to 1"]
    layers = len(core_of(model).model.layers)
    stages = pp * stages_per_process(schedule)
    if layers + 2 < stages:  # the embeddings and the head can each be a stage of their own
        return [f"the model has {layers} layers, too few for {stages} pipeline stages: lower "
                "distributed.pipeline_parallel or use schedule 1f1b"]
    return []


def _stage_module(lm: Any, layer_ids: list[int], first: bool, last: bool) -> Any:
    import torch
    from torch import nn

    class PipelineStageModule(nn.Module):
        """One stage's forward over the shared, pruned model (its parameters keep their names there)."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = lm
            self.layer_ids, self.first, self.last = layer_ids, first, last

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            core = core_of(self.lm)
            body = core.model
            h = body.embed_tokens(x) if self.first else x
            positions = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            rotary = body.rotary_emb(h, position_ids=positions)
            for i in self.layer_ids:
                # No mask: attention is causal and padding only on the right (module docstring).
                h = body.layers[str(i)](h, attention_mask=None, position_ids=positions, position_embeddings=rotary)
            if self.last:
                h = core.lm_head(body.norm(h))
            return h

    return PipelineStageModule()


@dataclass
class Pipeline:
    model: Any  # this process's pruned model: what the optimizer steps and checkpoints save
    stages: list[Any]
    schedule: Any
    ranges: list[tuple[int, int]]  # every stage's layer range, for run_info
    split_by: str  # "params" or "time": what the ranges balance
    costs: list[float]  # the embeddings', each layer's, and the head's: parameters, or seconds measured
    microbatches: int
    length: int  # every batch's padded width
    rows: int  # every batch's padded height: batch_size
    pad_id: int
    has_first: bool
    has_last: bool
    pp_group: Any
    tie_group: Any = None  # the first and last stage's processes when the head is tied to the embeddings
    tied: Any = None  # this process's copy of the tied weight
    schedule_name: str = "1f1b"
    norm: float = 1.0  # what each micro-batch's loss sum is divided by

    # -- batches
    def _fixed(self, batch: dict[str, Any], rows: int) -> tuple[Any, Any]:
        """input_ids and labels padded to ``rows`` x ``length``."""
        import torch.nn.functional as F

        ids, labels = batch["input_ids"], batch["labels"]
        width, height = self.length - ids.shape[1], rows - ids.shape[0]
        if width < 0:
            raise ValueError(f"a batch is {ids.shape[1]} tokens wide, past data.max_length {self.length}")
        ids = F.pad(ids, (0, width, 0, height), value=self.pad_id)
        labels = F.pad(labels, (0, width, 0, height), value=IGNORE)
        return ids, labels

    def _run(self, batch: dict[str, Any], train: bool) -> float:
        ids, labels = self._fixed(batch, self.rows)
        losses: list[Any] = []
        args = (ids,) if self.has_first else ()
        target = labels if self.has_last else None
        (self.schedule.step if train else self.schedule.eval)(*args, target=target, losses=losses)
        return float(sum(float(x) for x in losses)) if self.has_last else 0.0

    def loss_fn(self, logits: Any, labels: Any) -> Any:
        import torch.nn.functional as F

        logits = logits[:, :-1].float()
        targets = labels[:, 1:]
        total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE,
                                reduction="sum")
        return total / self.norm

    # -- the trainer's calls
    def train_step(self, batch: dict[str, Any], accum: int) -> tuple[float, dict[str, float]]:
        """Forward and backward over one batch on every stage; the batch's mean loss on the last stage's
        processes (0 elsewhere) and the batch's figures."""
        n = float((batch["labels"][:, 1:] != IGNORE).sum())
        # Each micro-batch's loss is its share of the batch's mean (and of the accumulated step's).
        self.norm = max(n, 1.0) * accum
        loss = self._run(batch, train=True) * accum
        return loss, stats(batch, n)

    def eval_sums(self, batch: dict[str, Any]) -> dict[str, float]:
        self.norm = 1.0  # sums, as the task's eval_sums
        loss_sum = self._run(batch, train=False)
        tokens = float((batch["labels"][:, 1:] != IGNORE).sum())
        return {"loss_sum": loss_sum, "tokens": tokens} if self.has_last else {}

    def sync_tied(self) -> None:
        """Sum the tied head's two gradients (the embedding's use on the first stage, the head's on the last)."""
        if self.tie_group is None or self.tied is None or self.tied.grad is None:
            return
        import torch.distributed as dist

        dist.all_reduce(self.tied.grad, group=self.tie_group)

    def clip_grad_norm(self, params: list[Any], max_norm: float) -> Any:
        """The norm over every stage's gradients (the tied weight once), then each process scales its own."""
        import torch.distributed as dist

        from engine.strategies.tensor_parallel import scale_to, squared_norm

        # The first stage counts the tied weight; the last leaves its copy out.
        squares = squared_norm(params, skip=self.tied if self.has_last and not self.has_first else None)
        if params:  # NCCL reduces GPU tensors only
            squares = squares.to(params[0].grad.device)
        dist.all_reduce(squares, group=self.pp_group)
        return scale_to(params, squares.cpu().sqrt(), max_norm)

    def describe(self) -> dict[str, Any]:
        pp = len(self.ranges) // stages_per_process(self.schedule_name)
        return {"schedule": self.schedule_name, "stages": [list(r) for r in self.ranges],
                "microbatches": self.microbatches, "bubble": bubble(self.schedule_name, pp, self.microbatches),
                "split_by": self.split_by, "stage_costs": stage_costs(self.ranges, self.costs)}


def stats(batch: dict[str, Any], target_tokens: float) -> dict[str, float]:
    ids = batch["input_ids"]
    return {"samples": float(ids.shape[0]), "tokens": float(batch["attention_mask"].sum()),
            "positions": float(ids.numel()), "target_tokens": target_tokens}


def _prune(model: Any, keep: set[int], first: bool, last: bool) -> None:
    """Drop every layer but ``keep`` (the rest keep their indices as names), and the embeddings or the
    head and norm where this process holds no first or last stage."""
    from torch import nn

    core = core_of(model)
    body = core.model
    body.layers = nn.ModuleDict({str(i): layer for i, layer in enumerate(body.layers) if i in keep})
    if not first:
        body.embed_tokens = None
    if not last:
        body.norm = None
        core.lm_head = None


def build(model: Any, layout: Any, spec: Any, task: Any, world: Any, pad_id: int) -> Pipeline:
    """This process's stages of ``model`` (already LoRA-wrapped), split further by tensor parallelism and
    sharded over the data-parallel replicas when the layout says so, with the schedule that runs them."""
    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining as pipelining

    d = spec.distributed
    pp, schedule_name = d.pipeline_parallel, d.pipeline_schedule
    v = stages_per_process(schedule_name)
    n_stages = pp * v
    core = core_of(model)
    if d.pipeline_split == "time":
        # Measured on the first process and sent to all: every process must cut the model the same way.
        costs: list[Any] = [None]
        if world.rank == 0:
            first_cost, cost, head = measure(model, max(1, spec.batch_size // d.pipeline_microbatches),
                                             _width(spec.data.max_length), torch.device(world.device))
            costs = [(first_cost, cost, head)]
        dist.broadcast_object_list(costs, src=0)
        first_cost, cost, head = costs[0]
    else:
        cost = [sum(p.numel() for p in layer.parameters()) for layer in core.model.layers]
        head = sum(p.numel() for p in core.lm_head.parameters()) + sum(p.numel() for p in core.model.norm.parameters())
        first_cost = core.model.embed_tokens.weight.numel()
    ranges = split(cost, first_cost, head, n_stages)
    mine = [s for s in range(n_stages) if s % pp == layout.pp_rank]
    first, last = 0 in mine, n_stages - 1 in mine
    tied_before = core.lm_head.weight is core.model.embed_tokens.weight
    keep = {i for s in mine for i in range(*ranges[s])}
    _prune(model, keep, first, last)
    mesh = layout.device_mesh
    if layout.tp > 1:
        from engine.strategies import tensor_parallel

        tensor_parallel.apply(model, mesh["tp"], tuple(task.block_types(model)))
    if spec.distributed.strategy == "fsdp" and layout.dp > 1:
        from torch.distributed.fsdp import fully_shard

        # Each block, and the embeddings and head on their own: the stages call these modules, never the
        # model's own forward, so each must gather its own parameters.
        body = core_of(model).model
        units = [*body.layers.values(), body.embed_tokens, core_of(model).lm_head, body.norm]
        for unit in units:
            if unit is not None:
                fully_shard(unit, mesh=mesh["dp"])
    dev = torch.device(world.device)
    group = mesh["pp"].get_group()
    stages = [pipelining.PipelineStage(_stage_module(model, list(range(*ranges[s])), s == 0, s == n_stages - 1),
                                       s, n_stages, dev, group=group) for s in mine]
    pipe = Pipeline(model=model, stages=stages, schedule=None, ranges=ranges, split_by=d.pipeline_split,
                    costs=[first_cost, *cost, head], microbatches=d.pipeline_microbatches,
                    length=_width(spec.data.max_length), rows=spec.batch_size, pad_id=pad_id, has_first=first,
                    has_last=last,
                    pp_group=group, schedule_name=schedule_name)
    cls = getattr(pipelining, SCHEDULES[schedule_name])
    kwargs = {"loss_fn": pipe.loss_fn, "scale_grads": False}  # the loss is already the batch's share
    pipe.schedule = cls(stages if v > 1 else stages[0], d.pipeline_microbatches, **kwargs)
    if tied_before:
        # Every process creates every pair's group, in the same order (torch's rule for new groups).
        coords = layout.pp_ends()
        for ranks in coords:
            g = dist.new_group(ranks)
            if world.rank in ranks:
                pipe.tie_group = g
        if first:
            pipe.tied = core_of(model).model.embed_tokens.weight
        elif last:
            pipe.tied = core_of(model).lm_head.weight
    return pipe


def _width(max_length: int) -> int:
    return -(-max_length // 8) * 8  # the collator's multiple of 8
