"""What a job is, written once: its kinds, its states and the words the GUI and CLI show for them.

A *job* is anything the engine runs in a process of its own (a fine-tune, a compression, an
export, a machine probe). Every module, the protocol (``jobs.*``) and the GUI use this word and
these names; its folder on disk is ``<data>/runs/<job id>`` (a name kept so existing data folders
still open). Stdlib only: the GUI imports this module.
"""

from __future__ import annotations

# -- kinds (the ``kind`` of ``jobs.start`` and of a job file) ---------------------------------
FINETUNE = "train.finetune"
SYSTEM_PROBE = "system.probe"
LORA_MERGE = "compress.lora_merge"
QUANTIZE = "compress.quantize"
QAT = "compress.qat"
PRUNE = "compress.prune"
EXPORT = "export.model"
MODEL_DOWNLOAD = "model.download"
MODEL_PREPARE = "system.prepare_model"  # a built-in model's folder, written once (engine/api/prepared_models.py)
EVALUATE = "evaluate.model"
SERVE = "serve.model"
SWEEP = "train.sweep"  # runs in the engine itself: it starts fine-tunes (docs/sweeps.md)
PII_SCAN = "pii.scan"
PII_SCRUB = "pii.scrub"
CHAIN = "compress.chain"  # runs in the engine itself: its stages are compression jobs (docs/compression.md)
KINDS = (FINETUNE, SYSTEM_PROBE, LORA_MERGE, QUANTIZE, QAT, PRUNE, EXPORT, MODEL_DOWNLOAD, MODEL_PREPARE, EVALUATE,
         SERVE, SWEEP, PII_SCAN, PII_SCRUB, CHAIN)
IN_ENGINE = (SWEEP, CHAIN)  # kinds with no process of their own: the engine's controller starts their jobs
COMPRESS_KINDS = (QUANTIZE, QAT, PRUNE)  # one recipe (engine/recipes/compress.py), one variant each
TRAINING_KINDS = (QAT, PRUNE)  # compressions that train, so they need the trainer's resources
SYSTEM_PREFIX = "system."  # the engine's housekeeping jobs: not shown with the user's jobs by default

# Kinds in words: the notification centre, the activity popup, Welcome's recent jobs, the CLI.
KIND_NOUNS = {
    FINETUNE: "Fine-tune",
    SYSTEM_PROBE: "Machine probe",
    LORA_MERGE: "LoRA merge",
    QUANTIZE: "Quantization",
    QAT: "Quantization-aware training",
    PRUNE: "Pruning",
    EXPORT: "Export",
    MODEL_DOWNLOAD: "Model download",
    MODEL_PREPARE: "Model preparation",
    EVALUATE: "Evaluation",
    SERVE: "Serving",
    SWEEP: "Sweep",
    PII_SCAN: "PII scan",
    PII_SCRUB: "PII scrub",
    CHAIN: "Compression chain",
}

# -- states -------------------------------------------------------------------------------------
QUEUED, RUNNING, STOPPING = "queued", "running", "stopping"
SUCCEEDED, FAILED, STOPPED, CANCELLED = "succeeded", "failed", "stopped", "cancelled"
# A process exists (or is being stopped): what the engine follows and may kill.
LIVE_STATES = (RUNNING, STOPPING)
# Not ended yet: what the GUI counts as active (a queued job has no process yet).
ACTIVE_STATES = (QUEUED, *LIVE_STATES)
# Ended for good. stopped: ended on request with a checkpoint (resumable); cancelled: killed, or
# never started.
FINAL_STATES = (SUCCEEDED, FAILED, STOPPED, CANCELLED)
STATES = ACTIVE_STATES + FINAL_STATES


def kind_noun(kind: str) -> str:
    return KIND_NOUNS.get(kind, kind or "Job")


def is_system(kind: str) -> bool:
    return str(kind or "").startswith(SYSTEM_PREFIX)
