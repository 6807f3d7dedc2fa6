"""The conversions behind the non-Paddle variants; each writes one variant's files at the paths it is given.

Each imports its converter where it runs, so that importing this module loads none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from steps.runtime.serving.engines.inputs import Batch, feeds

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


def quantize_static_int8(model_onnx: Path, dest_xml: Path, calibration: Sequence[Batch]) -> None:
    """OpenVINO int8 IR (`dest_xml` and its `.bin`): ONNX Runtime's static quantisation of every MatMul in QDQ form
    (int8 weights per output channel; uint8 activations whose ranges were observed on the `calibration` batches
    of (input_ids, token_type_ids)), which OpenVINO's CPU plugin runs as int8 kernels (VNNI) end to end.

    ONNX Runtime itself runs the QDQ graph slower than its dynamic int8 (`model.int8.onnx`); OpenVINO runs it
    about 1.4x faster than that (docs/benchmarks.md, "Engines"). The QDQ model is only an intermediate.
    """
    import logging

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    if not calibration:
        raise ValueError("static int8 needs calibration batches; none were given")
    names = [i.name for i in onnx.load(str(model_onnx), load_external_data=False).graph.input]

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self._left = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self._left, None)
            return None if batch is None else feeds(names, *batch)

    qdq = dest_xml.parent.with_name(dest_xml.parent.name + ".qdq.onnx")
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # a line per tensor left alone, and advice to pre-process the graph
    try:
        quantize_static(
            str(model_onnx), str(qdq), Batches(), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
        )  # fmt: skip
    finally:
        logging.disable(previous)
    try:
        onnx_to_openvino(qdq, dest_xml)
    finally:
        qdq.unlink(missing_ok=True)


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
