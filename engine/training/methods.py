"""Fine-tuning methods: full, LoRA and prompt tuning (peft); QLoRA on CUDA."""

from __future__ import annotations

from typing import Any

from engine.training.context import JobFailed

_PEFT_TASK_TYPES = {"text_classification": "SEQ_CLS", "causal_lm": "CAUSAL_LM"}


def qlora_unavailable_reason() -> str | None:
    """Why QLoRA cannot run here, or None when it can."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "QLoRA loads the base model in 4 bits with bitsandbytes, which needs a CUDA GPU; this machine has none"
    if importlib.util.find_spec("bitsandbytes") is None:
        return "QLoRA needs the bitsandbytes package: pip install bitsandbytes"
    return None


def load_kwargs(spec: Any) -> dict[str, Any]:
    """Extra ``from_pretrained`` arguments for the method: QLoRA loads the base in 4-bit NF4 on the GPU."""
    if spec.method.kind != "qlora":
        return {}
    reason = qlora_unavailable_reason()
    if reason:
        raise JobFailed(reason, "Use method lora (same adapters, full-precision base), or run on a CUDA host.")
    import torch
    from transformers import BitsAndBytesConfig

    compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"quantization_config": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                      bnb_4bit_use_double_quant=True,
                                                      bnb_4bit_compute_dtype=compute),
            "device_map": {"": torch.cuda.current_device()}}


def is_quantized(model: Any) -> bool:
    """4-bit models are placed on their GPU when loaded and must not be moved."""
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_quantized", False))


def apply(model: Any, spec: Any, task: Any) -> Any:
    """Wrap ``model`` for the method in ``spec.method``; returns the model to train."""
    kind = spec.method.kind
    if kind == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    if kind == "qlora":
        reason = qlora_unavailable_reason()
        if reason:
            raise JobFailed(reason, "Use method lora (same adapters, full-precision base), or run on a CUDA host.")
    import peft

    m = spec.method
    if kind == "qlora":
        if not is_quantized(model):
            raise JobFailed("QLoRA needs the base model loaded in 4 bits, and this task's loader did not",
                            "QLoRA applies to Hugging Face text and causal LM models; use lora for others.")
        model = peft.prepare_model_for_kbit_training(model,
                                                     use_gradient_checkpointing=spec.activation_checkpointing)
    task_type = _PEFT_TASK_TYPES.get(spec.task)
    if kind == "prompt_tuning":
        if task_type is None:
            raise JobFailed("Prompt tuning needs a text model", "Use method full or lora for images.")
        config = peft.PromptTuningConfig(task_type=task_type, num_virtual_tokens=m.num_virtual_tokens)
    else:
        targets = m.target_modules or task.lora_targets(model)
        if not targets:
            raise JobFailed("No LoRA target modules found in this model",
                            "Set method.target_modules to the names of its linear or conv layers.")
        extra: dict[str, Any] = {}
        if task_type == "SEQ_CLS" and hasattr(model, "pre_classifier"):
            # DistilBERT's head has two layers; peft would only train the last one.
            extra["modules_to_save"] = ["pre_classifier", "classifier"]
        if task_type is None:
            # Image models: the new classification head must train in full.
            extra["modules_to_save"] = task.head_modules(model) if hasattr(task, "head_modules") else None
        config = peft.LoraConfig(r=m.lora_r, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout,
                                 target_modules=targets, task_type=task_type, **extra)
    return peft.get_peft_model(model, config)


def count_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = total = 0
    for p in model.parameters():
        n = p.numel()
        total += n
        if p.requires_grad:
            trainable += n
    return trainable, total
