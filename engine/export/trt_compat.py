"""Check an ONNX graph against a TensorRT version before anything is copied to a device.

Each finding is ``{severity: error|warning|info, node, op, message, fix}``; ``node`` names the graph node
(or input) at fault and ``fix`` says what to do. Any error fails the export job before copying.

What is checked, and why (sources: see ``engine.export.trt_support``):

- every operator (subgraphs of If/Loop/Scan included) against that version's ONNX parser; ops outside the
  default ONNX domain (ONNX Runtime's ``com.microsoft`` fusions) have no importer at all;
- the model's opset against the newest one that parser reads;
- precision int8: TensorRT's explicit quantization needs QuantizeLinear/DequantizeLinear pairs with zero
  zero-points ("`y_zero_point` must be 0" in operators.md); ONNX Runtime's dynamic int8 ops (MatMulInteger,
  DynamicQuantizeLinear) are not TensorRT's, and int8 without Q/DQ nodes would build with placeholder scales;
- dynamic axes against the optimization profile (min/opt/max per dynamic input, as
  ``engine.export.trtexec.profile_shapes`` makes it): without one TensorRT cannot build the engine;
- DLA: layers the DLA cannot run fall back to the GPU (warnings), and the DLA runs fp16/int8 only.

A TensorRT version not in the tables is checked against the nearest known one at or below it, with a warning.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.export import trt_support as ts
from engine.training.context import JobFailed

if TYPE_CHECKING:
    import onnx

SEVERITIES = ("error", "warning", "info")
QDQ_FIX = ("quantize for TensorRT instead: compress.quantize with mode static and target tensorrt (QDQ nodes), "
           "or build this engine with precision fp16 from the fp32 model")


def _finding(severity: str, node: str, op: str, message: str, fix: str) -> dict[str, str]:
    return {"severity": severity, "node": node, "op": op, "message": message, "fix": fix}


def _load(model_or_path: Any) -> onnx.ModelProto:
    import onnx

    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    path = Path(model_or_path)
    if not path.is_file():
        raise JobFailed(f"no ONNX model at {path}", "export the model to ONNX first.")
    try:
        return onnx.load(str(path), load_external_data=False)  # the graph is enough; weights may be GBs
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and friends
        raise JobFailed(f"{path} is not a readable ONNX model: {exc}", "export the model to ONNX again.") from exc


def _walk(graph, prefix: str = ""):
    """(node name, node, graph) for every node, subgraphs (If/Loop/Scan bodies) included."""
    import onnx

    for i, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}#{i}" + (f" -> {node.output[0]}" if node.output else "")
        yield prefix + name, node, graph
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else (
                list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else [])
            for sub in subs:
                yield from _walk(sub, f"{prefix}{name}/{attr.name}/")


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ts.DEFAULT_DOMAINS), 0)


@functools.lru_cache(maxsize=256)
def _introduced(op_type: str) -> int | None:
    """The first ONNX opset that has ``op_type`` (None: not an ONNX operator)."""
    import onnx.defs

    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.name == op_type and s.domain in ts.DEFAULT_DOMAINS]
    return min(versions) if versions else None


def _jetpack_with(version: str) -> str:
    from engine.export.jetson_profiles import JETPACKS

    want = ts.parse_version(version)[:2]
    jps = [jp for jp, row in JETPACKS.items() if ts.parse_version(row["tensorrt"])[:2] >= want]
    return f" (JetPack {jps[0]} or newer)" if jps else ""


def _unsupported_fix(op: str, domain: str, opset: int, key: str) -> str:
    if op in ts.ORT_INT8_OPS:
        return QDQ_FIX
    if domain not in ts.DEFAULT_DOMAINS:
        return (f"export without ONNX Runtime's {domain} fusions (do not run ORT's transformer optimizer on a model "
                "meant for TensorRT), or replace the layer")
    parts = []
    since = _introduced(op)
    if since and since > ts.MIN_OPSET and opset >= since:
        parts.append(f"export with opset {since - 1} or lower, where the exporter writes {op} as basic ops")
    newer = ts.first_supporting(op)
    if newer and ts.parse_version(newer) > ts.parse_version(key):
        parts.append(f"target TensorRT {newer}{_jetpack_with(newer)}, whose parser imports {op}")
    parts.append("or replace the layer with ops TensorRT supports (or a TensorRT plugin)")
    return "; ".join(parts)


def _initializer_values(graph, name: str):
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
    return None


def _dynamic_inputs(model) -> dict[str, list[Any]]:
    """Graph inputs (not initializers) with at least one dynamic dim -> their dims (str/None for dynamic)."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                for d in inp.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) for d in dims):
            out[inp.name] = dims
    return out


def _check_profile(model, profile: dict | None) -> list[dict[str, str]]:
    findings = []
    dynamic = _dynamic_inputs(model)
    for name, dims in dynamic.items():
        axes = ", ".join(f"axis {i} ({d or '?'})" for i, d in enumerate(dims) if not isinstance(d, int))
        entry = (profile or {}).get(name)
        if not entry:
            findings.append(_finding(
                "error", name, "input",
                f"input {name!r} has dynamic {axes} but the optimization profile gives it no min/opt/max shapes; "
                "TensorRT cannot build an engine for it",
                "give a profile for every dynamic input (max_batch, opt_batch and seq_len in the export spec; "
                "engine.export.trtexec.profile_shapes), or export with fixed shapes"))
            continue
        shapes = [list(entry.get(k) or []) for k in ("min", "opt", "max")]
        problems = []
        if any(len(s) != len(dims) for s in shapes):
            problems.append(f"rank: the model has {len(dims)} axes, the profile {[len(s) for s in shapes]}")
        else:
            for axis, dim in enumerate(dims):
                lo, opt, hi = (s[axis] for s in shapes)
                if isinstance(dim, int) and not lo == opt == hi == dim:
                    problems.append(f"axis {axis} is fixed at {dim} but the profile gives {lo}/{opt}/{hi}")
                elif not 1 <= lo <= opt <= hi:
                    problems.append(f"axis {axis} needs 1 <= min <= opt <= max, got {lo}/{opt}/{hi}")
        if problems:
            findings.append(_finding("error", name, "input", f"the profile for input {name!r} does not fit the "
                                     f"model: {'; '.join(problems)}",
                                     "rebuild the profile from the model's inputs (trtexec.profile_shapes)"))
    for name in sorted(set(profile or {}) - set(dynamic)):
        findings.append(_finding("info", name, "input", f"the profile names {name!r}, which is not a dynamic input "
                                 "of the model; trtexec refuses shapes for static inputs", "leave it out"))
    return findings


def _dla_findings(graph_nodes, precision: str) -> list[dict[str, str]]:
    findings = []
    if precision not in ts.DLA_PRECISIONS:
        findings.append(_finding("warning", "(model)", "precision", f"the DLA runs only fp16 and int8; with "
                                 f"{precision} every layer falls back to the GPU", "build with precision fp16"))
    for name, node, graph in graph_nodes:
        op = node.op_type
        if op in ts.QDQ_OPS or op in ("Identity", "Flatten", "Squeeze", "Unsqueeze"):
            continue  # folded into scales / shuffles; not layers of their own on DLA
        if op in ts.DLA_CONST_WEIGHT and len(node.input) > 1 and _initializer_values(graph, node.input[1]) is None:
            findings.append(_finding("warning", name, op, f"{op} with two activation inputs cannot run on the DLA "
                                     "(its second input must be a build-time constant); it runs on the GPU",
                                     "keep it on the GPU (the fallback is on) or drop dla_core for this model"))
        elif op not in ts.DLA_NATIVE:
            findings.append(_finding("warning", name, op, f"the DLA has no {op} layer; it runs on the GPU "
                                     "(GPU fallback), with a DLA<->GPU copy around it",
                                     "accept the fallback, replace the layer, or drop dla_core for this model"))
    return findings


def check(model_or_path: Any, tensorrt_version: str, *, precision: str = "fp16", dla: bool = False,
          profile: dict[str, dict[str, list[int]]] | None = None) -> list[dict[str, str]]:
    """Findings for ``model_or_path`` (an onnx.ModelProto or a path) on TensorRT ``tensorrt_version``."""
    model = _load(model_or_path)
    try:
        key, exact = ts.resolve(str(tensorrt_version))
    except ValueError as exc:
        raise JobFailed(str(exc), "give a TensorRT version such as 8.6 or 10.3") from exc
    findings: list[dict[str, str]] = []
    if not exact:
        findings.append(_finding("warning", "(model)", "tensorrt", f"TensorRT {tensorrt_version} is not in the "
                                 f"compatibility tables; checked against TensorRT {key}, the nearest known version "
                                 "at or below it", "treat the result as approximate; the device build is the test"))
    max_opset, supported = ts.VERSIONS[key]
    opset = _opset(model)
    if opset > max_opset:
        findings.append(_finding("error", "(model)", f"opset {opset}",
                                 f"the model uses ONNX opset {opset}; TensorRT {key}'s parser reads opsets up to "
                                 f"{max_opset}", f"export with opset {max_opset} (ExportSpec.opset), or target a newer "
                                 "JetPack / TensorRT"))
    elif 0 < opset < ts.MIN_OPSET and ts.parse_version(key) >= (10,):
        findings.append(_finding("error", "(model)", f"opset {opset}", f"TensorRT {key} reads opsets "
                                 f"{ts.MIN_OPSET} to {max_opset}; the model uses {opset}",
                                 f"export with opset {max_opset}"))

    nodes = list(_walk(model.graph))
    reported: set[tuple[str, str]] = set()
    for name, node, _graph in nodes:
        domain = node.domain or ""
        if domain in ts.DEFAULT_DOMAINS and node.op_type in supported:
            continue
        where = f"{domain}::{node.op_type}" if domain not in ts.DEFAULT_DOMAINS else node.op_type
        findings.append(_finding("error", name, where, f"TensorRT {key}'s ONNX parser has no importer for "
                                 f"{where} (node {name})", _unsupported_fix(node.op_type, domain, opset, key)))
        reported.add((name, node.op_type))

    qdq = [(n, node, g) for n, node, g in nodes if node.op_type in ts.QDQ_OPS]
    dynamic_int8 = [(n, node) for n, node, _ in nodes if node.op_type in ts.ORT_INT8_OPS]
    if precision == "int8":
        if dynamic_int8:
            name, node = dynamic_int8[0]
            findings.append(_finding(
                "error", name, node.op_type,
                f"precision int8 needs QuantizeLinear/DequantizeLinear (QDQ) nodes; this graph is ONNX Runtime "
                f"dynamic int8 ({len(dynamic_int8)} {'/'.join(sorted({n.op_type for _, n in dynamic_int8}))} "
                "nodes), which TensorRT cannot build", QDQ_FIX))
        elif not qdq:
            findings.append(_finding(
                "error", "(model)", "QuantizeLinear", "precision int8 needs QuantizeLinear/DequantizeLinear (QDQ) "
                "nodes with calibrated scales; this graph has none, so TensorRT would build int8 with placeholder "
                "scales and the engine's output would be meaningless", QDQ_FIX))
    elif qdq:
        findings.append(_finding("warning", qdq[0][0], qdq[0][1].op_type, f"the graph has {len(qdq)} QDQ nodes "
                                 f"but precision is {precision}; TensorRT needs int8 enabled to build Q/DQ layers",
                                 "build with precision int8 (trtexec --int8 --fp16)"))
    for name, node, graph in qdq:
        if len(node.input) > 2 and node.input[2]:
            zp = _initializer_values(graph, node.input[2])
            if zp is not None and zp.size and bool((zp != 0).any()):
                findings.append(_finding("error", name, node.op_type, f"{node.op_type} {name} has a non-zero zero "
                                         "point; TensorRT takes symmetric quantization only (zero point 0)",
                                         "quantize with compress.quantize target tensorrt (symmetric activations "
                                         "and weights)"))

    findings += _check_profile(model, profile)
    if dla:
        findings += _dla_findings([(n, node, g) for n, node, g in nodes if (n, node.op_type) not in reported],
                                  precision)
    return findings


def summary(findings: list[dict[str, Any]]) -> dict[str, Any]:
    errors = sum(1 for f in findings if f.get("severity") == "error")
    warnings = sum(1 for f in findings if f.get("severity") == "warning")
    return {"ok": errors == 0, "errors": errors, "warnings": warnings}
