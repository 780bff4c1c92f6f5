"""Activation offload: the tensors autograd saves for the backward pass kept in pinned CPU memory instead
of GPU memory, and copied back when the backward needs them (torch.autograd.graph.saved_tensors_hooks, as
torch's save_on_cpu, plus a count of what moved so the Monitor can show it)."""

from __future__ import annotations

from typing import Any


def hooks() -> Any:
    """A context manager; its ``moved_bytes`` counts what was copied to CPU since the last ``take()``."""
    import torch

    class Offload(torch.autograd.graph.saved_tensors_hooks):
        def __init__(self) -> None:
            self.moved_bytes = 0
            super().__init__(self._pack, self._unpack)

        def _pack(self, t: Any) -> Any:
            if t.device.type == "cpu":
                return t
            self.moved_bytes += t.numel() * t.element_size()
            host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=True)
            host.copy_(t, non_blocking=True)
            return t.device, host

        @staticmethod
        def _unpack(packed: Any) -> Any:
            if isinstance(packed, tuple):
                device, host = packed
                return host.to(device, non_blocking=True)
            return packed

        def take(self) -> int:
            moved, self.moved_bytes = self.moved_bytes, 0
            return moved

    return Offload()
