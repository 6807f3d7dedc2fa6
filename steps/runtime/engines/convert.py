"""The conversions behind the non-Paddle variants; each writes one variant's files at the paths it is given.

Each imports its converter where it runs, so that importing this module loads none of them.
"""

from __future__ import annotations

from pathlib import Path

ONNX_OPSET = 17  # LayerNormalization is a single op from 17 on; older opsets spell it out in ~10 ops


class ConversionError(RuntimeError):
    """A converter ran but produced no model."""


def paddle_to_onnx(model_json: Path, params: Path, dest: Path) -> None:
    """An ONNX model of the Paddle export: paddle2onnx, then ONNX Runtime's basic graph optimisations, saved.

    paddle2onnx writes every weight as a Constant node (ONNX Runtime's quantiser only quantises initializers,
    so int8 of the raw export quantises nothing) and multiplies the word embedding by a vocabulary-sized mask
    for its padding row (123 MB more on a 40 000-token, hidden-768 model). The basic level — constant folding
    and redundant-node removal, independent of the execution provider — turns the weights into initializers
    and folds the mask, so the file is the size of the Paddle parameters and every engine reads the same graph.
    """
    import onnxruntime as ort
    import paddle2onnx

    # save_file=None returns the bytes and skips paddle2onnx's own optimiser step; from 2.1 on that step
    # defaults to polygraphy, which pip-installs onnx_graphsurgeon (and a NumPy 2) into the running environment.
    try:
        raw = paddle2onnx.export(str(model_json), str(params), save_file=None, opset_version=ONNX_OPSET)
    except NameError:
        raw = None  # it logs the conversion error, then fails to return the model it never made
    if not raw:
        raise ConversionError(f"paddle2onnx could not convert {model_json}; its log above says why")
    raw_file = dest.with_name(dest.name + ".raw")
    raw_file.write_bytes(raw)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(dest)
    options.log_severity_level = 3  # the raw graph's unused constants draw one warning each
    ort.InferenceSession(str(raw_file), options, providers=["CPUExecutionProvider"])
    raw_file.unlink()


def quantize_int8(model_onnx: Path, dest: Path) -> None:
    """ONNX Runtime's dynamic quantisation: int8 weights (MatMul, Gemm, embedding Gather), activations
    quantised per call from their observed range (no calibration data needed)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantiser logs a line per tensor it leaves alone (INFO, on the root logger Paddle configures).
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        quantize_dynamic(model_onnx, dest, weight_type=QuantType.QInt8)
    finally:
        logging.disable(previous)


def onnx_to_openvino(model_onnx: Path, dest_xml: Path) -> None:
    """OpenVINO IR (`dest_xml` and its `.bin`) of an ONNX model, weights kept in fp32."""
    import openvino as ov

    # The IR convert_model makes already has OpenVINO's common graph passes applied (a smaller XML; the
    # plugin would apply them at every compile otherwise). Its usage telemetry is kept out of the lock
    # (pyproject.toml, [tool.uv] override-dependencies).
    model = ov.convert_model(model_onnx)
    dest_xml.parent.mkdir(parents=True, exist_ok=True)
    # compress_to_fp16 (the default) would round the weights to fp16 before the bf16 run rounds them again.
    ov.save_model(model, str(dest_xml), compress_to_fp16=False)
