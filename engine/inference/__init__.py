"""The Playground's inference worker: one process per loaded model, started by the engine on demand.

``models`` opens any model a user can pick (a finished fine-tune, a compression variant, a built-in,
a Hugging Face folder or a cached Hub id); ``chat`` generates with streamed text, stop and speed
figures; ``classify`` gives a classifier's probabilities; ``worker`` is the process's main loop
(JSON lines on stdin and stdout, docs/playground.md). The engine side is engine/daemon/inference.py.
"""
