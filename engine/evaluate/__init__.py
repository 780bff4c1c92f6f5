"""Evaluation of a compressed variant side by side with its parent (docs/compression.md).

- ``runners``: ``TorchRunner`` and ``OrtRunner``, one ``run(batch) -> logits`` for both runtimes;
- ``metrics``: classification and language-model figures, top-1 agreement (numpy only);
- ``latency``: interleaved timing of several runners on the same batch;
- ``facts``: parameters, MACs and file sizes;
- ``memory``: the resident memory a model adds, measured in a fresh process;
- ``pair``: ``evaluate_pair(...)``, which builds and writes ``evaluation.json``.

Every module imports torch, numpy and onnxruntime inside its functions.
"""
