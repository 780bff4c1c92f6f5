"""Where a pipeline cuts a model, and what its schedule leaves idle: the arithmetic shared by the run
(engine/strategies/pipeline.py) and the fit estimate, which shows the cut before launch. No torch."""

from __future__ import annotations


def stages_per_process(schedule: str) -> int:
    return 2 if schedule.startswith("interleaved") else 1


def bubble(schedule: str, pp: int, microbatches: int) -> float:
    """The idle share of a step in theory: (p - 1) / (m + p - 1), and with v stages per process the
    warm-up and drain are v times shorter: (p - 1) / (v m + p - 1)."""
    v = stages_per_process(schedule)
    return (pp - 1) / (v * microbatches + pp - 1)


def split(costs: list[float], first: float, last: float, stages: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) layer ranges, one per stage, that minimise the largest stage's cost; the first
    stage also carries ``first`` (embeddings), the last ``last`` (norm and head). A stage may hold no layer
    when there are fewer layers than stages."""
    n = len(costs)
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[s][i]: the smallest possible largest cost placing layers [0, i) on stages [0, s).
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for s in range(1, stages + 1):
        extra = (first if s == 1 else 0) + (last if s == stages else 0)
        for i in range(n + 1):
            for j in range(i + 1):
                cost = max(best[s - 1][j], prefix[i] - prefix[j] + extra)
                if cost < best[s][i]:
                    best[s][i], cut[s][i] = cost, j
    ranges, i = [], n
    for s in range(stages, 0, -1):
        j = cut[s][i]
        ranges.append((j, i))
        i = j
    return ranges[::-1]


def stage_costs(ranges: list[tuple[int, int]], costs: list[float]) -> list[float]:
    """Each stage's share of ``costs`` (embeddings, layers..., head), as split balanced them."""
    embed, layers, head = costs[0], costs[1:-1], costs[-1]
    out = [float(sum(layers[a:b])) for a, b in ranges]
    out[0] += embed
    out[-1] += head
    return out
