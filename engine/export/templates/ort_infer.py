#!/usr/bin/env python3
"""Run this exported classifier with ONNX Runtime; it needs nothing from the program that made it.

  python infer.py "some text" ["more text" ...]        text models: one JSON line per input
  python infer.py digit.png pixels.npy ...             image models: image files (Pillow) or .npy arrays
  python infer.py --npz inputs.npz --out outputs.npz   raw inputs in, logits out (used to check the export)

Each JSON line has the input, the predicted ``label``, the ``probabilities`` of every
label (softmax of the logits) and the ``logits``. The files beside this one:
``model.onnx`` (+ ``model.onnx.data``), ``labels.json``, ``preprocess.json`` (what the
model was trained to read) and, for text, the tokenizer files.

An ``.npy`` array of floats shaped (C, H, W) or (N, C, H, W) is taken as ready model
input; an array of uint8 shaped (H, W) or (H, W, C) as an image to preprocess.
In ``--npz`` files, input ``name`` of batch ``i`` is the key ``b<i>.<name>``; the
logits of batch ``i`` are written as ``b<i>``.

Only numpy, onnxruntime and, for text, tokenizers are imported (Pillow for image
files, transformers only when the tokenizer files need it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort  # noqa: TID253 - a standalone script, not an engine module

HERE = Path(__file__).resolve().parent


def load_session(threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(0, threads)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    # ONNX Runtime's CPU SkipLayerNormalization is slower than the Add + LayerNormalization it replaces
    # (4.5x on a [16, 32, 384] tensor with onnxruntime 1.32): leave that rewrite off.
    return ort.InferenceSession(str(HERE / "model.onnx"), opts, providers=["CPUExecutionProvider"],
                                disabled_optimizers=["SkipLayerNormFusion"])


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- text


class TextEncoder:
    """The model's tokenizer with its truncation and padding (preprocess.json)."""

    def __init__(self, pre: dict):
        self.max_length = int(pre["max_length"])
        self.pad_id = int(pre.get("pad_token_id", 0))
        self.side = pre.get("padding_side", "right")
        self.hf = None
        self.tok = self._tokenizers()
        if self.tok is None:
            self.hf = self._transformers()

    def _tokenizers(self):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            return None
        if (HERE / "tokenizer.json").is_file():
            tok = Tokenizer.from_file(str(HERE / "tokenizer.json"))
        elif (HERE / "vocab.txt").is_file():
            from tokenizers import BertWordPieceTokenizer

            config = {}
            if (HERE / "tokenizer_config.json").is_file():
                config = json.loads((HERE / "tokenizer_config.json").read_text(encoding="utf-8"))
            tok = BertWordPieceTokenizer(str(HERE / "vocab.txt"), lowercase=bool(config.get("do_lower_case", True)))
        else:
            return None
        tok.no_padding()
        tok.enable_truncation(self.max_length)
        tok.enable_padding(direction=self.side, pad_id=self.pad_id, pad_token=tok.id_to_token(self.pad_id) or "[PAD]")
        return tok

    def _transformers(self):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            sys.exit("this model's tokenizer needs the tokenizers package (pip install tokenizers) "
                     "or, without tokenizer.json or vocab.txt, transformers")
        tok = AutoTokenizer.from_pretrained(str(HERE), local_files_only=True)
        tok.padding_side = self.side
        return tok

    def __call__(self, texts: list[str], names: list[str]) -> dict[str, np.ndarray]:
        if self.tok is not None:
            enc = self.tok.encode_batch(texts)
            arrays = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
                      "token_type_ids": [e.type_ids for e in enc]}
        else:
            arrays = dict(self.hf(texts, truncation=True, max_length=self.max_length, padding="longest"))
            arrays.setdefault("token_type_ids", [[0] * len(ids) for ids in arrays["input_ids"]])
        return {n: np.asarray(arrays[n], dtype=np.int64) for n in names}


# ---------------------------------------------------------------- images


def preprocess_image(pixels: np.ndarray, pre: dict) -> np.ndarray:
    """An image array (H, W) or (H, W, C), uint8 -> the model's (C, H, W) float32 input."""
    height, width = pre["size"]
    if pixels.ndim == 2:
        pixels = np.stack([pixels] * 3, -1)
    if pixels.shape[-1] == 1:
        pixels = np.repeat(pixels, 3, -1)
    pixels = pixels[..., :3]
    if pixels.shape[:2] != (height, width):
        try:
            from PIL import Image
        except ImportError:
            sys.exit(f"resizing a {pixels.shape[1]}x{pixels.shape[0]} image to {width}x{height} needs Pillow "
                     "(pip install pillow), or pass arrays of that size")
        pixels = np.asarray(Image.fromarray(pixels.astype(np.uint8)).resize((width, height), Image.BILINEAR))
    x = pixels.astype(np.float32) * np.float32(pre.get("scale", 1 / 255))
    x = (x - np.asarray(pre["mean"], np.float32)) / np.asarray(pre["std"], np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)


def load_images(path: str, pre: dict) -> list[np.ndarray]:
    if path.lower().endswith(".npy"):
        arr = np.load(path, allow_pickle=False)
        if arr.dtype.kind == "f" and arr.ndim in (3, 4):
            return list(arr.astype(np.float32)) if arr.ndim == 4 else [arr.astype(np.float32)]
        return [preprocess_image(arr, pre)]
    try:
        from PIL import Image
    except ImportError:
        sys.exit("reading image files needs Pillow (pip install pillow); or pass .npy arrays")
    with Image.open(path) as im:
        im.load()
        if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
            rgba = im.convert("RGBA")
            im = Image.new("RGB", rgba.size, (255, 255, 255))
            im.paste(rgba, mask=rgba.getchannel("A"))
        return [preprocess_image(np.asarray(im.convert("RGB")), pre)]


# ---------------------------------------------------------------- runs


def run_npz(sess: ort.InferenceSession, inputs: str, out: str) -> None:
    names = [i.name for i in sess.get_inputs()]
    data = np.load(inputs, allow_pickle=False)
    batches = sorted({int(m.group(1)) for k in data.files if (m := re.match(r"b(\d+)\.", k))})
    results = {}
    for i in batches:
        feeds = {n: data[f"b{i}.{n}"] for n in names}
        results[f"b{i}"] = sess.run(["logits"], feeds)[0]
    np.savez(out, **results)


def classify(sess, labels: list[str], shown: list[str], feeds: dict[str, np.ndarray]) -> None:
    logits = sess.run(["logits"], feeds)[0]
    for item, row, p in zip(shown, logits, softmax(logits.astype(np.float64)), strict=True):
        top = int(row.argmax())
        names = [labels[j] if j < len(labels) else str(j) for j in range(len(row))]
        line = {"input": item, "label": names[top],
                "probabilities": {name: round(float(v), 6) for name, v in zip(names, p, strict=True)},
                "logits": [float(v) for v in row]}
        print(json.dumps(line), flush=True)  # noqa: T201 - the script's output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", help="texts (text models), or image / .npy files (image models)")
    parser.add_argument("--npz", help="raw model inputs (b<i>.<input name>); needs --out")
    parser.add_argument("--out", help="where --npz writes the logits (b<i>)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads (0: its default)")
    args = parser.parse_args(argv)
    sess = load_session(args.threads)
    if args.npz:
        if not args.out:
            parser.error("--npz needs --out")
        run_npz(sess, args.npz, args.out)
        return 0
    if not args.inputs:
        parser.error("give texts or image files to classify (or --npz)")
    pre = json.loads((HERE / "preprocess.json").read_text(encoding="utf-8"))
    labels = json.loads((HERE / "labels.json").read_text(encoding="utf-8"))
    names = [i.name for i in sess.get_inputs()]
    step = max(1, args.batch_size)
    if "pixel_values" in names:
        items = [(path, x) for path in args.inputs for x in load_images(path, pre)]
        for k in range(0, len(items), step):
            chunk = items[k:k + step]
            classify(sess, labels, [p for p, _ in chunk], {"pixel_values": np.stack([x for _, x in chunk])})
        return 0
    encode = TextEncoder(pre)
    for k in range(0, len(args.inputs), step):
        texts = args.inputs[k:k + step]
        classify(sess, labels, texts, encode(texts, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
