"""Growable per-series arrays with min/max block summaries: a chart's whole history, cheap to draw.

x (step, int64) grows within a series; y is float64. Arrays double when full
(``reserve`` sizes them up front). ``envelope`` gives the min/max of blocks
covering a range from summaries kept up to date lazily, so drawing a million
points costs a few thousand values, not a pass over the history.
"""

from __future__ import annotations

import math

import numpy as np

LEVEL_FACTOR = 4  # each summary level merges this many blocks of the level below


class SeriesBuffer:
    """x/y arrays that grow by doubling; ``x`` and ``y`` are views of the filled part.

    Beside the raw points it keeps min/max summaries of blocks of 4, 16, 64, ...
    points, brought up to date lazily when drawn (cost: the new points only), so
    drawing a million points takes a few thousand summary values, not a pass
    over the whole history.
    """

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.int64)
        self._y = np.empty(capacity, dtype=np.float64)
        self.count = 0
        # _levels[k-1] = (max, min, complete blocks) for blocks of LEVEL_FACTOR**k points
        self._levels: list[list] = []

    @property
    def x(self) -> np.ndarray:
        return self._x[:self.count]

    @property
    def y(self) -> np.ndarray:
        return self._y[:self.count]

    @property
    def capacity(self) -> int:
        return len(self._x)

    def last_y(self) -> float | None:
        return float(self._y[self.count - 1]) if self.count else None

    def truncate_at(self, x: int) -> None:
        """Drop every point at x or later (a resumed run re-runs those steps)."""
        if self.count and x <= self._x[self.count - 1]:
            self.count = int(np.searchsorted(self._x[:self.count], x, side="left"))
            for k, level in enumerate(self._levels, start=1):
                level[2] = min(level[2], self.count // LEVEL_FACTOR ** k)

    def append(self, x: int, y: float) -> None:
        self.truncate_at(x)
        if self.count == len(self._x):
            self._grow(self.count + 1)
        self._x[self.count] = x
        self._y[self.count] = y
        self.count += 1

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Append many points at once (x increasing)."""
        xs = np.asarray(xs, dtype=np.int64)
        if not len(xs):
            return
        self.truncate_at(int(xs[0]))
        end = self.count + len(xs)
        if end > len(self._x):
            self._grow(end)
        self._x[self.count:end] = xs
        self._y[self.count:end] = ys
        self.count = end

    def clear(self) -> None:
        self.count = 0
        self._levels.clear()

    def reserve(self, capacity: int) -> None:
        """Make room for ``capacity`` points now, so no append has to copy the history."""
        if capacity > len(self._x):
            self._grow(capacity)

    def _grow(self, needed: int) -> None:
        size = max(needed, 2 * len(self._x))
        # New arrays rather than resize(): pyqtgraph may still hold views of the old ones.
        for name in ("_x", "_y"):
            old = getattr(self, name)
            new = np.empty(size, dtype=old.dtype)
            new[:self.count] = old[:self.count]
            setattr(self, name, new)

    def nearest(self, x: float) -> int | None:
        """Index of the point whose x is nearest to ``x``."""
        if not self.count:
            return None
        xs = self.x
        i = int(np.searchsorted(xs, math.floor(x), side="left"))
        candidates = [j for j in (i - 1, i, i + 1) if 0 <= j < self.count]
        return min(candidates, key=lambda j: abs(xs[j] - x))

    # -- summaries for drawing ---------------------------------------------------------

    def _update_levels(self) -> None:
        below_max, below_min, below_n = self._y, self._y, self.count
        k = 0
        while below_n >= LEVEL_FACTOR:
            k += 1
            if len(self._levels) < k:
                self._levels.append([np.empty(0), np.empty(0), 0])
            level = self._levels[k - 1]
            full = below_n // LEVEL_FACTOR
            if len(level[0]) < full:
                size = max(full, 2 * len(level[0]), 16)
                for i in (0, 1):
                    grown = np.empty(size)
                    grown[:level[2]] = level[i][:level[2]]
                    level[i] = grown
            done = level[2]
            if full > done:
                a, b = done * LEVEL_FACTOR, full * LEVEL_FACTOR
                level[0][done:full] = below_max[a:b].reshape(-1, LEVEL_FACTOR).max(axis=1)
                level[1][done:full] = below_min[a:b].reshape(-1, LEVEL_FACTOR).min(axis=1)
                level[2] = full
            below_max, below_min, below_n = level[0], level[1], full
        del self._levels[k:]

    def envelope(self, i0: int, i1: int, points: int) -> tuple[np.ndarray, np.ndarray]:
        """Points [i0, i1) as about ``points``..4*``points`` values that keep every peak.

        Whole blocks become a (max, min) pair at the block's first x, using the
        coarsest summary level that still gives ``points`` blocks; the ragged
        end uses finer levels, then raw points.
        """
        i0, i1 = max(0, i0), min(self.count, i1)
        if i1 - i0 <= 2 * points:
            return self._x[i0:i1], self._y[i0:i1]
        self._update_levels()
        top = 0
        while top < len(self._levels) and (i1 - i0) // LEVEL_FACTOR ** (top + 1) >= points:
            top += 1
        xs, ys = [], []
        start = i0 - i0 % LEVEL_FACTOR ** top
        for k in range(top, 0, -1):
            size = LEVEL_FACTOR ** k
            mx, mn, done = self._levels[k - 1]
            j0, j1 = start // size, min(done, -(-i1 // size))
            if j1 <= j0:
                continue
            x = self._x[j0 * size:j1 * size:size]
            xs.append(np.repeat(x, 2))
            pair = np.empty((j1 - j0, 2))
            pair[:, 0] = mx[j0:j1]
            pair[:, 1] = mn[j0:j1]
            ys.append(pair.reshape(-1))
            start = j1 * size
        # The rest as raw points; at least the last one, so the line ends where the data does.
        start = min(start, i1 - 1)
        xs.append(self._x[start:i1])
        ys.append(self._y[start:i1])
        return np.concatenate(xs), np.concatenate(ys)
