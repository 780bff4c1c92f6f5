"""One plain sentence per term the GUI uses, for tooltips where a newcomer meets the term.

The sentences say what a thing does for the user, not how it is implemented; the
docs go further. ``OPTION_TERMS`` maps the option keys the pages already use
(spec values such as "lora", "fsdp", "static_int8") to the terms that explain them,
so a page gives its choice a tooltip with one call and no wording of its own.
"""

from __future__ import annotations

import html

TERMS: dict[str, str] = {
    # How much of the model is trained
    "full fine-tune": "Every weight of the model is trained: usually the best result, but the most memory "
                      "and a whole new model to save.",
    "LoRA": "Small low-rank adapter matrices are trained beside the frozen weights, so training needs a "
            "fraction of the memory and the saved adapter is a few megabytes.",
    "QLoRA": "LoRA on a copy of the model stored in 4 bits, the least memory of all, for large models on a "
             "CUDA GPU.",
    "prompt tuning": "Only a few learned virtual tokens put before every input are trained; the model itself "
                     "stays frozen.",
    # How training is split across processes
    "DDP": "Distributed Data Parallel: every process holds a full copy of the model and trains on its own "
           "slice of each batch, then they average their gradients.",
    "FSDP2": "Fully Sharded Data Parallel: the weights, gradients and optimizer state are split across the "
             "processes, so each holds only its share of the model.",
    "DeepSpeed ZeRO": "DeepSpeed's memory-saving data parallelism: the higher the ZeRO stage, the more of the "
                      "training state is split across the processes instead of copied.",
    "ZeRO-1": "ZeRO stage 1 splits the optimizer state across the processes, the largest saving for the "
              "least communication.",
    "ZeRO-2": "ZeRO stage 2 splits the optimizer state and the gradients across the processes.",
    "ZeRO-3": "ZeRO stage 3 splits the optimizer state, the gradients and the weights themselves across the "
              "processes, so a model larger than one device can train.",
    "tensor parallel": "Tensor parallelism splits each layer's weight matrices over several GPUs, which compute "
                       "their slices of every layer together: a model too large for one GPU trains, at the cost "
                       "of communication inside every layer, best kept within one machine.",
    "pipeline parallel": "Pipeline parallelism cuts the model's layers into stages on different GPUs; each "
                         "batch flows through them in micro-batches, and the stages idle a little at the start "
                         "and end of each step (the bubble).",
    "pipeline schedule": "The order in which micro-batches pass through the stages: GPipe runs all forwards "
                         "then all backwards; 1F1B alternates them and keeps fewer activations; interleaved 1F1B "
                         "gives each GPU two stages, which shrinks the bubble.",
    "micro-batches": "The pieces each batch is cut into for the pipeline: more pieces, a smaller bubble.",
    "activation offload": "The activations kept for the backward pass wait in CPU memory instead of GPU memory "
                          "and are copied back when needed: less GPU memory, some time for the copies.",
    "offload": "Offloading keeps part of the training state in CPU memory instead of on the device, which "
               "saves device memory at the cost of speed.",
    # Numbers and memory
    "mixed precision": "Most arithmetic runs in a 16-bit format while a 32-bit copy keeps the weights "
                       "accurate: less memory and faster on GPUs.",
    "fp32": "32-bit floating point, full precision: the safe default and the most memory.",
    "bf16": "bfloat16, a 16-bit format with fp32's range: half the activation memory and rarely any "
            "accuracy cost.",
    "fp16": "16-bit floating point: half the memory and fast on GPUs, but with a small range that can "
            "overflow without loss scaling.",
    "activation checkpointing": "Activations are recomputed during the backward pass instead of kept, "
                                "which saves much memory for about 30% more time.",
    "gradient accumulation": "Gradients of several small batches are added up before each weight update, "
                             "so a large effective batch fits in little memory.",
    # Training speed
    "MFU": "Model FLOPs utilization: the share of the device's peak arithmetic rate that the model's own "
           "training maths actually uses, the fairest single measure of how fast a run is.",
    "torch.compile": "PyTorch compiles the model into fused kernels before training, which costs a minute "
                     "at the start and usually makes every step faster on a GPU.",
    "scaled dot-product attention": "PyTorch's built-in attention (SDPA) picks a fast fused kernel for the "
                                    "device, using less memory than the step-by-step version.",
    "flash attention": "FlashAttention-2, a separately installed attention kernel for recent NVIDIA GPUs in "
                       "16-bit that is fast and needs little memory for long sequences.",
    "fused AdamW": "The optimizer updates all weights in one or a few large kernels instead of one small "
                   "step per weight tensor, which saves time on a GPU.",
    "foreach AdamW": "The optimizer updates the weights a group of tensors at a time (a few kernels per step): "
                     "the fast choice on a CPU and with DeepSpeed.",
    "padding": "Filler tokens that make the examples of a batch the same length; their share of the step is "
               "work that teaches nothing (packing or length grouping lower it).",
    "data wait": "The share of each step spent waiting for the next batch instead of computing: above a few "
                 "percent, more data workers help.",
    "memory per rank": "Each training process's peak memory (a rank is one process): GPU memory on a GPU, the "
                       "process's resident memory on a CPU, against what its device has.",
    "data workers": "Separate processes prepare the next batches while the device trains on this one, so it "
                    "never waits for data.",
    "sequence packing": "Several short training examples share one sequence, each attending only to itself, so "
                        "no compute is spent on padding.",
    "length grouping": "Examples of similar length are batched together, so short texts are not padded to the "
                       "length of a long one.",
    "warmup": "The learning rate starts near zero and rises over the first steps, which keeps early "
              "training stable.",
    # The wizard's fields
    "strategy": "How the work is split across processes: one process, a full model copy per process (DDP), "
                "or the model's training state split between them (FSDP2, DeepSpeed ZeRO).",
    "processes": "How many training processes run on this machine, each with its share of every batch; on "
                 "a GPU machine, one per GPU.",
    "device": "Where the maths runs: a CUDA GPU when there is one (much faster), else the CPU.",
    "learning rate": "How far each update moves the weights: too high and training diverges, too low and "
                     "it learns slowly; adapters want a larger rate than a full fine-tune.",
    "batch size": "How many examples each process reads per step: larger is faster per example and smoother, "
                  "but needs more memory.",
    "training length": "How long training runs, in optimizer steps or in passes over the training data "
                       "(epochs).",
    "schedule": "How the learning rate changes over the run: falling linearly or along a cosine to zero, "
                "staying constant, or rising then falling (one cycle).",
    "evaluation interval": "How many steps pass between two measurements on the validation data; each one "
                           "adds a point to the Monitor's eval chart.",
    "checkpoint interval": "How many steps pass between two saved checkpoints; a stopped or crashed run "
                           "resumes from the last one.",
    "LoRA rank": "The size of the adapter matrices: a higher rank can learn more, and costs more memory and "
                 "a larger adapter.",
    "LoRA alpha": "Scales what the adapter adds to the model; the ratio alpha / rank is what matters, and "
                  "twice the rank is a common choice.",
    "LoRA dropout": "A share of the adapter's inputs dropped at random while training, which makes it less "
                    "likely to memorise a small dataset.",
    "target modules": "The layers that get LoRA adapters; left empty, the attention's query and value "
                      "projections of the architecture (q_proj and v_proj on Llama-style models).",
    "virtual tokens": "How many learned tokens prompt tuning puts before every input: more can learn more, "
                      "and use up more of the sequence.",
    "tokens per example": "Each example is cut to this many tokens; longer takes more memory and time, "
                          "shorter may cut off the text that matters.",
    "image size": "Every image is resized to this many pixels per side before training.",
    "validation share": "The share of your data held out to measure the model on examples it never trained "
                        "on; ignored when a separate validation file is given.",
    "text column": "The column (or JSON field) of your file that holds the text to classify.",
    "label column": "The column (or JSON field) of your file that holds each example's class.",
    "chat template": "How a conversation (system, user and assistant turns) becomes the one text a language "
                     "model reads: the markers around each turn, and where the answer starts.",
    "run on": "This machine alone, several machines at once (this one and training hosts reached over SSH, "
              "as one run), or a Slurm cluster's nodes.",
    "slurm": "A cluster scheduler: a job is submitted from the cluster's login node (sbatch), waits in a "
             "partition's queue until the nodes it asks for are free, then runs there, and Ember submits, "
             "follows, stops (with a checkpoint) and resumes it.",
    "rendezvous": "The address and port where the machines of a multi-machine run find each other before "
                  "training starts; node 0 listens there.",
    "augmentation": "Random changes to the training images (crops, flips, colour) so the model learns the "
                    "class rather than the exact picture.",
    "run name": "The name the run is listed under in Runs and saved under with its job file.",
    # Compression
    "QDQ": "Quantize-DeQuantize pairs around each int8 operation in an ONNX graph, the form TensorRT and "
           "ONNX Runtime read int8 models in.",
    "dynamic int8": "Weights are stored as 8-bit integers and activations are quantized on the fly, with no "
                    "calibration data needed.",
    "static int8": "Weights and activations are both 8-bit integers, with activation ranges fixed beforehand "
                   "by calibration.",
    "calibration": "Calibration runs a few training examples through the model to measure the activation "
                   "ranges that int8 must cover.",
    "QAT": "Quantization-aware training fine-tunes for a few steps with int8 rounding simulated, so the "
           "model learns to tolerate it.",
    "structured pruning": "Whole attention heads, feed-forward units or channels are removed, so the model "
                          "gets smaller and faster on any hardware.",
    "distillation": "A smaller student model is trained to imitate this run's predictions, keeping most of "
                    "its accuracy at a fraction of the size.",
    "LoRA merge": "The LoRA adapters are folded into the base weights, leaving one plain model that needs "
                  "no adapter code to run.",
    "Pareto front": "The models for which nothing else is both faster and more accurate: the sensible "
                    "choices, each a different trade-off.",
    # Deployment
    "ONNX": "An open file format for models that many runtimes and accelerators can load without PyTorch.",
    "ONNX Runtime": "Microsoft's engine for running ONNX models fast on CPUs and GPUs, installed with pip "
                    "install onnxruntime.",
    "TorchScript": "A saved form of a PyTorch model that runs in Python or C++ (libtorch) without the "
                   "model's source code.",
    "torch.export": "PyTorch's whole-graph export (.pt2), the starting point for AOTInductor and ExecuTorch.",
    "TensorRT": "NVIDIA's optimiser and runtime that compiles a model into an engine tuned for one GPU.",
    "Triton": "NVIDIA Triton Inference Server, which serves models over HTTP and gRPC from a model "
              "repository folder.",
    "merged checkpoint": "A Hugging Face model folder (safetensors weights, tokenizer, chat template) with any "
                         "LoRA adapter folded in: what vLLM, TGI, SGLang and transformers load.",
    "GGUF": "llama.cpp's single-file model format, also read by Ollama and LM Studio; its quantized types "
            "(q8_0, q4_k_m, ...) store weights in 8 or about 4.5 bits.",
    "KV cache": "The keys and values of the tokens a language model has already read, kept so each new token "
                "costs one step instead of re-reading the whole text.",
    "Jetson": "NVIDIA's small embedded computers with a GPU, for running models on devices at the edge.",
}

# Option keys used by the pages, and the terms that explain each (first is the main one).
OPTION_TERMS: dict[str, tuple[str, ...]] = {
    # fine-tune methods (spec method.kind)
    "full": ("full fine-tune",),
    "lora": ("LoRA",),
    "qlora": ("QLoRA",),
    "prompt_tuning": ("prompt tuning",),
    # strategies (spec distributed.strategy) and ZeRO stages
    "ddp": ("DDP",),
    "fsdp": ("FSDP2",),
    "deepspeed": ("DeepSpeed ZeRO",),
    "zero_1": ("ZeRO-1",),
    "zero_2": ("ZeRO-2",),
    "zero_3": ("ZeRO-3",),
    # precisions
    "fp32": ("fp32",),
    "bf16": ("bf16", "mixed precision"),
    "fp16": ("fp16",),
    # speed options (spec speed.attention, speed.optimizer_impl)
    "sdpa": ("scaled dot-product attention",),
    "flash_attention_2": ("flash attention",),
    "fused": ("fused AdamW",),
    # compress techniques
    "lora_merge": ("LoRA merge",),
    "dynamic_int8": ("dynamic int8",),
    "static_int8": ("static int8", "QDQ", "calibration"),
    "qat": ("QAT", "QDQ"),
    "prune": ("structured pruning",),
    "distill": ("distillation",),
    # export formats
    "onnx": ("ONNX",),
    "ort": ("ONNX Runtime",),
    "torchscript": ("TorchScript",),
    "pt2": ("torch.export",),
    "tensorrt": ("TensorRT",),
    "triton": ("Triton",),
    "jetson": ("Jetson",),
    "hf": ("merged checkpoint",),
    "gguf": ("GGUF",),
    "onnx_genai": ("ONNX Runtime", "KV cache"),
}

_BY_LOWER = {term.lower(): term for term in TERMS}


def _term(term: str) -> str:
    """The TERMS key for ``term``, whatever its case."""
    try:
        return _BY_LOWER[term.lower()]
    except KeyError:
        raise KeyError(f"No glossary entry for {term!r}; add one to app/text/glossary.py TERMS") from None


def explain(term: str) -> str:
    """The one-sentence explanation of ``term`` (case does not matter)."""
    return TERMS[_term(term)]


def term_tooltip(term: str, extra: str = "") -> str:
    """Rich text for a tooltip: "<b>LoRA</b>: …", then ``extra`` (plain text) on its own line."""
    key = _term(term)
    text = f"<b>{html.escape(key, quote=False)}</b>: {html.escape(TERMS[key], quote=False)}"
    return f"{text}<br>{html.escape(extra, quote=False)}" if extra else text


def field_tooltip(term: str, key: str, extra: str = "") -> str:
    """A form field's tooltip: its term explained, ``extra``, then the job file's key for it."""
    return term_tooltip(term, " ".join(part for part in (extra, f"Job file: {key}.") if part))


def option_tooltip(key: str, extra: str = "") -> str:
    """The tooltip for a page's option ``key`` ("lora", "static_int8", "onnx", …): its terms, then ``extra``."""
    tips = [term_tooltip(term) for term in OPTION_TERMS[key]]
    if extra:
        tips.append(html.escape(extra, quote=False))
    return "<br>".join(tips)
