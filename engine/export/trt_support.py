"""What TensorRT's ONNX parser reads, per TensorRT version: operators and the newest opset.

Data only; ``engine.export.trt_compat`` checks a graph against it.

Sources (onnx/onnx-tensorrt, the parser TensorRT ships):

- ``docs/operators.md`` on the release branches: the operator support matrix and its header line
  "TensorRT 8.0 / 8.2 / 8.4 supports operators up to Opset 13", "TensorRT 8.5 supports operators up to
  Opset 17", "TensorRT 10.0 supports operators in the inclusive range of opset 9 to opset 20",
  "TensorRT 10.15 supports operators in the inclusive range of opset 9 to opset 24".
  The 10.15 matrix is copied below as ``_SUPPORTED_10_15`` (its "Y" rows); the 8.4 and 8.5 matrices as
  ``_SUPPORTED_8_4`` / ``_SUPPORTED_8_5``.
- ``docs/Changelog.md``: what each release added, which gives the other versions by difference:
  8.0 -> 8.2 EA added Einsum, IsNaN, GatherND, Scatter, ScatterElements, ScatterND, Sign, Round;
  8.4 added Shrink and Xor; 8.6 EA added GroupNormalization, LayerNormalization, IsInf;
  9.2 added Hardmax; 10.1 DeformConv; 10.4 BlackmanWindow, HammingWindow, HannWindow; 10.5 STFT;
  10.14 Attention; 10.15 RotaryEmbedding, RMSNormalization, TensorScatter.
- The 10.3 opset: operators.md kept the 10.0 header ("opset 9 to opset 20") until after 10.7; a maintainer
  pointed at it as current in NVIDIA/TensorRT#4336 (Feb 2025, "TRT only supports the opset 17 definition" of
  GroupNormalization at the time).

Known errata handled here: the 8.4 matrix marks Reciprocal and Shrink "N" although Reciprocal has an importer
since 7.x (the 8.5 matrix marks it "Y" with no changelog entry) and the 8.4 changelog lists Shrink as added;
both count as supported on 8.4.

Never supported by any version: ONNX Runtime's integer ops (MatMulInteger, ConvInteger,
DynamicQuantizeLinear, QLinearConv, QLinearMatMul: "N" in every matrix) and any operator outside the default
ONNX domain (``com.microsoft`` fused ops from ONNX Runtime's optimizer, ``ai.onnx.ml``), which the parser can
only hand to a plugin of the same name.

DLA: ``DLA_NATIVE`` is the "Native" column of NVIDIA's Orin DLA operator matrix
(NVIDIA/Deep-Learning-Accelerator-SW ``operators/README.md``, for TensorRT 8.5/8.6 on JetPack 5.1.1+); Xavier's
DLA supports a subset of it, so the set is an upper bound there.
"""

from __future__ import annotations

# ---------------------------------------------------------------- operators

# "Y" rows of docs/operators.md for TensorRT 10.15.
_SUPPORTED_10_15 = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh Attention AveragePool BatchNormalization
BlackmanWindow Cast CastLike Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum
DeformConv DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor
Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual
GridSample GroupNormalization GRU HammingWindow HannWindow HardSigmoid HardSwish Hardmax Identity If
ImageScaler InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax
Loop LRN LSTM LpNormalization LpPool MatMul Max MaxPool Mean MeanVarianceNormalization Min Mish Mod Mul Neg
NonMaxSuppression NonZero Not OneHot Or Pad ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal
RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize
ReverseSequence RMSNormalization RNN RoiAlign RotaryEmbedding Round STFT ScaledTanh Scan Scatter
ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign
SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh TensorScatter ThresholdedRelu Tile TopK Transpose Trilu
Unsqueeze Upsample Where Xor
""".split())

# "Y" rows of docs/operators.md for TensorRT 8.5.
_SUPPORTED_8_5 = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Celu Clip
Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout
Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gemm GlobalAveragePool
GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample GRU HardSwish HardSigmoid Identity If ImageScaler
InstanceNormalization IsNaN LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool
MatMul Max MaxPool Mean MeanVarianceNormalization Min Mod Mul Neg NonMaxSuppression NonZero Not OneHot Or Pad
ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range
Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
ReduceSumSquare Relu Reshape Resize ReverseSequence RNN RoiAlign Round ScaledTanh Scan Scatter ScatterElements
ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt
Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Upsample Where Xor
""".split())

# "Y" rows of docs/operators.md for TensorRT 8.4, plus the two errata (Reciprocal, Shrink; module docstring).
_SUPPORTED_8_4 = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Celu Clip
Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout
Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gemm GlobalAveragePool
GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GRU HardSigmoid Identity If ImageScaler InstanceNormalization
IsNaN LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool MatMul Max MaxPool Mean
Min Mul Neg NonMaxSuppression Not Or Pad ParametricSoftplus Pow PRelu QuantizeLinear RandomUniform
RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin
ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize ReverseSequence RNN Round ScaledTanh Scan Scatter
ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign
SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Unsqueeze Upsample Where
Xor
""".split())

_SUPPORTED_8_2 = _SUPPORTED_8_4 - {"Shrink", "Xor"}
_SUPPORTED_8_0 = _SUPPORTED_8_2 - {"Einsum", "IsNaN", "GatherND", "Scatter", "ScatterElements", "ScatterND",
                                   "Sign", "Round"}
_SUPPORTED_8_6 = _SUPPORTED_8_5 | {"GroupNormalization", "LayerNormalization", "IsInf"}
_SUPPORTED_10_0 = _SUPPORTED_10_15 - {"DeformConv", "BlackmanWindow", "HammingWindow", "HannWindow", "STFT",
                                      "Attention", "RotaryEmbedding", "RMSNormalization", "TensorScatter"}
_SUPPORTED_10_3 = _SUPPORTED_10_0 | {"DeformConv"}

# version -> (newest opset the parser reads, operators it imports)
VERSIONS: dict[str, tuple[int, frozenset[str]]] = {
    "8.0": (13, _SUPPORTED_8_0),
    "8.2": (13, _SUPPORTED_8_2),
    "8.4": (13, _SUPPORTED_8_4),
    "8.5": (17, _SUPPORTED_8_5),
    "8.6": (17, _SUPPORTED_8_6),
    "10.0": (20, _SUPPORTED_10_0),
    "10.3": (20, _SUPPORTED_10_3),
    "10.15": (24, _SUPPORTED_10_15),
}
MIN_OPSET = 9  # "inclusive range of opset 9 to ...": older opsets are not read by 10.x

# ONNX Runtime's integer operators: dynamic int8 (compress.quantize mode dynamic) and QOperator graphs.
ORT_INT8_OPS = frozenset({"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QLinearConv",
                          "QLinearMatMul"})
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
NEVER_SUPPORTED = ORT_INT8_OPS | frozenset({
    "BitShift", "Bernoulli", "Compress", "ConcatFromSequence", "Det", "MaxRoiPool", "MaxUnpool", "Multinomial",
    "NegativeLogLikelihoodLoss", "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt",
    "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
    "SoftmaxCrossEntropyLoss", "SplitToSequence", "StringNormalizer", "TfIdfVectorizer", "Unique",
})
DEFAULT_DOMAINS = ("", "ai.onnx")

# ---------------------------------------------------------------- DLA

# "Native" through TensorRT in the Orin DLA operator matrix; Shape/ConstantOfShape are folded at build time.
DLA_NATIVE = frozenset({
    "Abs", "Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv",
    "ConvTranspose", "Equal", "Gemm", "LeakyRelu", "LRN", "MatMul", "Max", "MaxPool", "Mul", "PRelu", "Relu",
    "Reshape", "Resize", "Shape", "Sigmoid", "Slice", "Softmax", "Split", "Sub", "Sum", "Tanh", "Transpose",
    "Upsample",
})
# DLA runs these only when their second input is a build-time constant (TensorRT turns them into a 1x1 Conv).
DLA_CONST_WEIGHT = frozenset({"MatMul", "Gemm"})
DLA_PRECISIONS = ("fp16", "int8")


def parse_version(text: str) -> tuple[int, ...]:
    """(major, minor, ...) from '10.3', '10.3.0.30-1+cuda12.5', 'v100300' (trtexec banner) or '8.2.1'."""
    text = str(text).strip().lstrip("vV")
    if text.isdigit() and len(text) >= 4:
        # trtexec's banner number: MAJOR*1000 + MINOR*100 + PATCH up to 9.x (8201 = 8.2.1, 8412 = 8.4.12),
        # MAJOR*10000 + MINOR*100 + PATCH from 10.0 (100300 = 10.3.0, 101501 = 10.15.1)
        n = int(text)
        if n >= 100000:
            return n // 10000, (n // 100) % 100, n % 100
        return n // 1000, (n // 100) % 10, n % 100
    parts = []
    for piece in text.replace("-", ".").replace("+", ".").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    if not parts:
        raise ValueError(f"not a TensorRT version: {text!r}")
    return tuple(parts)


def resolve(version: str) -> tuple[str, bool]:
    """The known table for ``version`` and whether it is an exact (major.minor) match.

    Not known: the newest known version at or below it (what it surely reads), or the oldest known when it is
    older than all of them.
    """
    want = parse_version(version)[:2]
    keys = sorted(VERSIONS, key=lambda k: parse_version(k))
    for key in keys:
        if parse_version(key)[:2] == want:
            return key, True
    below = [k for k in keys if parse_version(k)[:2] <= want]
    return (below[-1] if below else keys[0]), False


def max_opset(version: str) -> int:
    return VERSIONS[resolve(version)[0]][0]


def supports(version: str, op_type: str, domain: str = "") -> bool:
    if domain not in DEFAULT_DOMAINS:
        return False
    return op_type in VERSIONS[resolve(version)[0]][1]


def first_supporting(op_type: str) -> str | None:
    """The oldest known TensorRT version whose parser imports ``op_type``."""
    for key in sorted(VERSIONS, key=lambda k: parse_version(k)):
        if op_type in VERSIONS[key][1]:
            return key
    return None
