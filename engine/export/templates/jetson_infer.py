#!/usr/bin/env python3
"""Run this exported classifier on a Jetson: TensorRT (model.plan), or ONNX Runtime (model.onnx) as the fallback.

  python3 infer.py "some text" ["more text" ...]        text models: one JSON line per input
  python3 infer.py digit.png pixels.npy ...             image models: image files (Pillow) or .npy arrays
  python3 infer.py --npz inputs.npz --out outputs.npz   raw inputs in (b<i>.<input name>), logits out (b<i>)
  --backend tensorrt|onnxruntime|auto (default auto: TensorRT when model.plan, tensorrt and pycuda or
  cuda-python are all there, else ONNX Runtime)

Each JSON line has the input, the predicted ``label``, the ``probabilities`` of every label (softmax of the
logits), the ``logits`` and the ``backend`` that ran. Build model.plan first with ``bash build_engine.sh``.
Batches larger than the engine's profile allows are split; longer texts are cut to its longest sequence.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def softmax(x: np.ndarray):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- backends


class TrtSession:
    """model.plan through TensorRT's Python API; buffers through pycuda or cuda-python (whichever imports)."""

    def __init__(self, plan):
        import tensorrt as trt

        self.trt = trt
        self.cuda = self._cuda()
        logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(logger)
        self.engine = self.runtime.deserialize_cuda_engine(plan.read_bytes())
        if self.engine is None:
            raise RuntimeError("TensorRT cannot load model.plan (built by another TensorRT version or GPU? "
                               "run build_engine.sh again)")
        self.context = self.engine.create_execution_context()
        self.named = hasattr(self.engine, "num_io_tensors")  # TensorRT 8.5+: the name-based I/O API
        if self.named:
            names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
            self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
            self.output_names = [n for n in names if n not in self.input_names]
        else:  # 8.2/8.4 (JetPack 4.6, 5.0): bindings
            names = [self.engine.get_binding_name(i) for i in range(self.engine.num_bindings)]
            self.input_names = [n for i, n in enumerate(names) if self.engine.binding_is_input(i)]
            self.output_names = [n for n in names if n not in self.input_names]

    @staticmethod
    def _cuda():
        try:
            import pycuda.autoinit  # noqa: F401 - creates the context
            import pycuda.driver as drv

            return ("pycuda", drv)
        except ImportError:
            from cuda import cudart  # cuda-python

            return ("cuda-python", cudart)

    def _dtype(self, name):
        trt = self.trt
        dt = self.engine.get_tensor_dtype(name) if self.named else \
            self.engine.get_binding_dtype(self.engine.get_binding_index(name))
        return np.dtype(trt.nptype(dt))

    def _alloc(self, nbytes):
        kind, lib = self.cuda
        if kind == "pycuda":
            return lib.mem_alloc(max(1, nbytes))
        err, ptr = lib.cudaMalloc(max(1, nbytes))
        if int(err) != 0:
            raise RuntimeError(f"cudaMalloc failed ({err})")
        return ptr

    def _free(self, ptr):
        kind, lib = self.cuda
        if kind == "pycuda":
            ptr.free()
        else:
            lib.cudaFree(ptr)

    def _copy_in(self, ptr, arr: np.ndarray):
        kind, lib = self.cuda
        if kind == "pycuda":
            lib.memcpy_htod(ptr, arr)
        else:
            lib.cudaMemcpy(ptr, arr.ctypes.data, arr.nbytes, lib.cudaMemcpyKind.cudaMemcpyHostToDevice)

    def _copy_out(self, arr: np.ndarray, ptr):
        kind, lib = self.cuda
        if kind == "pycuda":
            lib.memcpy_dtoh(arr, ptr)
        else:
            lib.cudaMemcpy(arr.ctypes.data, ptr, arr.nbytes, lib.cudaMemcpyKind.cudaMemcpyDeviceToHost)

    def run(self, outputs, feeds):
        buffers, results = [], {}
        try:
            bindings = [0] * (0 if self.named else self.engine.num_bindings)
            for name in self.input_names:
                arr = np.ascontiguousarray(feeds[name], dtype=self._dtype(name))  # int64 ids -> int32 on 8.x
                ptr = self._alloc(arr.nbytes)
                buffers.append(ptr)
                self._copy_in(ptr, arr)
                if self.named:
                    self.context.set_input_shape(name, arr.shape)
                    self.context.set_tensor_address(name, int(ptr))
                else:
                    index = self.engine.get_binding_index(name)
                    self.context.set_binding_shape(index, arr.shape)
                    bindings[index] = int(ptr)
            hosts = {}
            for name in self.output_names:
                if self.named:
                    shape = tuple(self.context.get_tensor_shape(name))
                else:
                    shape = tuple(self.context.get_binding_shape(self.engine.get_binding_index(name)))
                host = np.empty(shape, dtype=self._dtype(name))
                ptr = self._alloc(host.nbytes)
                buffers.append(ptr)
                hosts[name] = (host, ptr)
                if self.named:
                    self.context.set_tensor_address(name, int(ptr))
                else:
                    bindings[self.engine.get_binding_index(name)] = int(ptr)
            ok = self.context.execute_async_v3(0) if self.named else self.context.execute_v2(bindings)
            if not ok:
                raise RuntimeError("TensorRT failed to run the engine (input shapes outside its profile?)")
            for name, (host, ptr) in hosts.items():
                self._copy_out(host, ptr)  # a blocking copy on the default stream: waits for the run
                results[name] = host.astype(np.float32)
        finally:
            for ptr in buffers:
                self._free(ptr)
        return [results[n] for n in outputs]


class OrtSession:
    def __init__(self, path):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                     if p in ort.get_available_providers()]
        self.sess = ort.InferenceSession(str(path), opts, providers=providers)
        self.input_names = [i.name for i in self.sess.get_inputs()]

    def run(self, outputs, feeds):
        return self.sess.run(outputs, {n: feeds[n] for n in self.input_names})


def open_backend(choice):
    """(session, backend name, why the other one was not used)."""
    plan = HERE / "model.plan"
    why = ""
    if choice in ("auto", "tensorrt"):
        try:
            if not plan.is_file():
                raise FileNotFoundError("no model.plan (run bash build_engine.sh)")
            sess = TrtSession(plan)
            return sess, f"tensorrt+{sess.cuda[0]}", ""
        except Exception as exc:  # noqa: BLE001 - any missing piece means the fallback
            if choice == "tensorrt":
                sys.exit(f"TensorRT backend unavailable: {exc}")
            why = f"TensorRT unavailable ({exc}); using ONNX Runtime"
    try:
        return OrtSession(HERE / "model.onnx"), "onnxruntime", why
    except ImportError:
        sys.exit((why + "; " if why else "") + "ONNX Runtime is not installed either (pip install onnxruntime)")


# ---------------------------------------------------------------- inputs


def limits():
    """(largest batch, longest sequence) the engine's profile allows, from manifest.json."""
    try:
        shapes = json.loads((HERE / "manifest.json").read_text(encoding="utf-8")).get("shapes") or {}
    except (OSError, ValueError):
        return 1 << 30, None
    batch = min((s["max"][0] for s in shapes.values()), default=1 << 30)
    seqs = [s["max"][1] for s in shapes.values() if len(s["max"]) == 2]
    return batch, (min(seqs) if seqs else None)


def encode_texts(texts, names, pre, max_seq):
    max_length = int(pre["max_length"]) if max_seq is None else min(int(pre["max_length"]), max_seq)
    pad_id = int(pre.get("pad_token_id", 0))
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(HERE / "tokenizer.json")) if (HERE / "tokenizer.json").is_file() else None
    except ImportError:
        tok = None
    if tok is not None:
        tok.enable_truncation(max_length)
        tok.enable_padding(direction=pre.get("padding_side", "right"), pad_id=pad_id,
                           pad_token=tok.id_to_token(pad_id) or "[PAD]")
        enc = tok.encode_batch(texts)
        arrays = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
                  "token_type_ids": [e.type_ids for e in enc]}
    else:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            sys.exit("text models need the tokenizers package (pip install tokenizers) or transformers")
        hf = AutoTokenizer.from_pretrained(str(HERE), local_files_only=True)
        hf.padding_side = pre.get("padding_side", "right")
        arrays = dict(hf(texts, truncation=True, max_length=max_length, padding="longest"))
        arrays.setdefault("token_type_ids", [[0] * len(ids) for ids in arrays["input_ids"]])
    return {n: np.asarray(arrays[n], dtype=np.int64) for n in names}


def image_input(path, pre):
    if path.lower().endswith(".npy"):
        arr = np.load(path, allow_pickle=False)
        if arr.dtype.kind == "f" and arr.ndim in (3, 4):
            return list(arr.astype(np.float32)) if arr.ndim == 4 else [arr.astype(np.float32)]
        pixels = arr
    else:
        try:
            from PIL import Image
        except ImportError:
            sys.exit("reading image files needs Pillow (pip install pillow); or pass .npy arrays")
        with Image.open(path) as im:
            pixels = np.asarray(im.convert("RGB"))
    height, width = pre["size"]
    if pixels.ndim == 2:
        pixels = np.stack([pixels] * 3, -1)
    pixels = pixels[..., :3] if pixels.shape[-1] >= 3 else np.repeat(pixels, 3, -1)
    if pixels.shape[:2] != (height, width):
        from PIL import Image

        pixels = np.asarray(Image.fromarray(pixels.astype(np.uint8)).resize((width, height), Image.BILINEAR))
    x = pixels.astype(np.float32) * np.float32(pre.get("scale", 1 / 255))
    x = (x - np.asarray(pre["mean"], np.float32)) / np.asarray(pre["std"], np.float32)
    return [np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)]


# ---------------------------------------------------------------- main


def classify(sess, backend, labels, shown, feeds):
    logits = sess.run(["logits"], feeds)[0]
    for item, row, p in zip(shown, logits, softmax(logits.astype(np.float64))):  # noqa: B905 - py3.6
        top = int(row.argmax())
        name = labels[top] if top < len(labels) else str(top)
        print(json.dumps({"input": item, "label": name, "backend": backend,  # noqa: T201 - the script's output
                          "probabilities": {labels[j] if j < len(labels) else str(j): round(float(v), 6)
                                            for j, v in enumerate(p)},
                          "logits": [float(v) for v in row]}), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", help="texts (text models), or image / .npy files (image models)")
    parser.add_argument("--npz", help="raw model inputs (b<i>.<input name>); needs --out")
    parser.add_argument("--out", help="where --npz writes the logits (b<i>)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--backend", choices=("auto", "tensorrt", "onnxruntime"), default="auto")
    args = parser.parse_args(argv)
    sess, backend, why = open_backend(args.backend)
    if why:
        print(why, file=sys.stderr)  # noqa: T201
    names = sess.input_names
    max_batch, max_seq = limits()
    if args.npz:
        if not args.out:
            parser.error("--npz needs --out")
        data = np.load(args.npz, allow_pickle=False)
        batches = sorted({int(k[1:k.index(".")]) for k in data.files if re.match(r"b\d+\.", k)})
        np.savez(args.out, **{f"b{i}": sess.run(["logits"], {n: data[f"b{i}.{n}"] for n in names})[0]
                              for i in batches})
        return 0
    if not args.inputs:
        parser.error("give texts or image files to classify (or --npz)")
    pre = json.loads((HERE / "preprocess.json").read_text(encoding="utf-8"))
    labels = json.loads((HERE / "labels.json").read_text(encoding="utf-8"))
    step = max(1, min(args.batch_size, max_batch))
    if "pixel_values" in names:
        items = [(path, x) for path in args.inputs for x in image_input(path, pre)]
        for k in range(0, len(items), step):
            chunk = items[k:k + step]
            classify(sess, backend, labels, [p for p, _ in chunk], {"pixel_values": np.stack([x for _, x in chunk])})
        return 0
    for k in range(0, len(args.inputs), step):
        texts = args.inputs[k:k + step]
        classify(sess, backend, labels, texts, encode_texts(texts, names, pre, max_seq))
    return 0


if __name__ == "__main__":
    sys.exit(main())
