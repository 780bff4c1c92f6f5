"""Load an exported artifact in a fresh process and write its logits: the parity check's other half.

    python -m engine.export.reload FORMAT PATH INPUTS.npz OUTPUTS.npz

FORMAT is onnx (ONNX Runtime), torchscript (``torch.jit.load``) or pt2
(``torch.export.load(...).module()``). INPUTS.npz holds ``names`` (the model's input
names, in order) and, per batch ``i``, the arrays ``b<i>.<name>``; OUTPUTS.npz gets
the logits of batch ``i`` as ``b<i>``. Only what the artifact needs is imported: an
ONNX reload never imports torch, so nothing of the exporting process can leak in.
"""

from __future__ import annotations

import re
import sys

FORMATS = ("onnx", "torchscript", "pt2")


def read_batches(path: str) -> tuple[list[str], list[dict]]:
    import numpy as np

    data = np.load(path, allow_pickle=False)
    names = [str(n) for n in data["names"]]
    count = len({int(m.group(1)) for k in data.files if (m := re.match(r"b(\d+)\.", k))})
    return names, [{n: data[f"b{i}.{n}"] for n in names} for i in range(count)]


def run(fmt: str, path: str, inputs: str, outputs: str) -> None:
    import numpy as np

    names, batches = read_batches(inputs)
    results = {}
    if fmt == "onnx":
        from engine.compress.onnx_export import session

        sess = session(path)
        for i, b in enumerate(batches):
            results[f"b{i}"] = sess.run(["logits"], b)[0]
    else:
        import torch

        module = torch.jit.load(path, map_location="cpu") if fmt == "torchscript" else torch.export.load(path).module()
        with torch.no_grad():
            for i, b in enumerate(batches):
                out = module(*(torch.from_numpy(b[n]) for n in names))
                results[f"b{i}"] = (out.logits if hasattr(out, "logits") else out).float().numpy()
    np.savez(outputs, **results)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4 or args[0] not in FORMATS:
        sys.stderr.write(f"usage: python -m engine.export.reload {{{','.join(FORMATS)}}} PATH INPUTS.npz OUTPUTS.npz\n")
        return 2
    run(*args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
