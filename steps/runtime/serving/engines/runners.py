"""`open_engine`: one engine variant of an exported model, loaded and ready to run token ids into logits."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from steps.runtime.serving.engines.cpu import cpu_flags, missing_features
from steps.runtime.serving.engines.inputs import feeds
from steps.runtime.serving.engines.variants import PADDLE_MODEL, PADDLE_PARAMS, Variant, variant_spec


class Engine(Protocol):
    """A loaded variant. `run` returns the logits as float32 ([batch, labels] or [batch, seq, labels]); it is
    not thread-safe: callers serialise calls, or open one engine per thread."""

    name: str
    threads: int

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray: ...


class EngineUnavailable(RuntimeError):
    """This node cannot run the variant: its package, its files or a CPU feature it needs is missing."""


def open_engine(variant: str, model_dir: Path, threads: int, flags: Iterable[str] | None = None) -> Engine:
    """Load `variant` from `model_dir` to run on `threads` CPU threads.

    `flags`: the CPU's features (default: this node's). EngineUnavailable says what is missing; ValueError
    for an unknown variant.
    """
    spec = variant_spec(variant)
    model_dir = Path(model_dir)
    lacking = missing_features(variant, cpu_flags() if flags is None else flags)
    if lacking:
        raise EngineUnavailable(f"{variant} needs CPU features this node lacks: {', '.join(lacking)}")
    absent = [name for name in spec.files if not (model_dir / name).is_file()]
    if absent:
        raise EngineUnavailable(
            f"{model_dir} has no {', '.join(absent)} for {variant}; "
            "steps.runtime.serving.engines.build_variants writes it"
        )
    if spec.device == "gpu":
        _require_gpu(spec)
    openers: dict[str, Callable[[Variant, Path, int], Engine]] = {
        "paddle": PaddleEngine,
        "paddle-trt": PaddleEngine,
        "onnxruntime": OnnxRuntimeEngine,
        "openvino": OpenVinoEngine,
    }
    try:
        return openers[spec.engine](spec, model_dir, threads)
    except ImportError as exc:
        raise EngineUnavailable(
            f"{variant} needs the {exc.name or spec.engine} package, which is not installed"
        ) from exc


def _require_gpu(spec: Variant) -> None:
    """EngineUnavailable unless this Paddle sees a CUDA device (and, for TensorRT, is built with it)."""
    import paddle
    from paddle.inference import get_trt_compile_version

    if not paddle.device.is_compiled_with_cuda() or paddle.device.cuda.device_count() == 0:
        raise EngineUnavailable(f"{spec.name} needs a CUDA GPU; this Paddle build or node has none")
    # (0, 0, 0): built without TensorRT (paddle/fluid/pybind/inference_api.cc). Paddle 3's `core` has no
    # is_compiled_with_tensorrt, so asking it raised AttributeError instead of EngineUnavailable.
    if spec.engine == "paddle-trt" and tuple(get_trt_compile_version()) == (0, 0, 0):
        raise EngineUnavailable(f"{spec.name} needs a Paddle built with TensorRT; this image's is not")


# TensorRT builds its engine for a range of input shapes: [batch, sequence] from 1x1 up to these.
TRT_MAX_BATCH, TRT_MAX_SEQUENCE, TRT_OPT = 64, 512, (16, 128)


class PaddleEngine:
    """Paddle Inference on the export itself; bf16 through oneDNN; on a GPU, fp32 or fp16, TensorRT at fp16."""

    def __init__(self, spec: Variant, model_dir: Path, threads: int) -> None:
        import paddle.inference as paddle_infer

        self.name, self.threads = spec.name, threads
        config = paddle_infer.Config(str(model_dir / PADDLE_MODEL), str(model_dir / PADDLE_PARAMS))
        config.disable_glog_info()
        if spec.device == "gpu":
            self._gpu(config, spec)
        else:
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(threads)
        if spec.precision == "bf16":
            # oneDNN is on by default in Paddle 3.3.1, and with it off enable_mkldnn_bfloat16 is silently ignored
            # (fp32 logits): turn it on explicitly.
            config.enable_mkldnn()
            config.enable_mkldnn_bfloat16()
        self._predictor = paddle_infer.create_predictor(config)
        self._inputs = {name: self._predictor.get_input_handle(name) for name in self._predictor.get_input_names()}
        self._output = self._predictor.get_output_handle(self._predictor.get_output_names()[0])

    @staticmethod
    def _gpu(config: Any, spec: Variant) -> None:
        """CUDA device 0 (a pod sees only the GPUs it was given), fp16 by Paddle's mixed-precision pass or by
        TensorRT; TensorRT with dynamic shapes, so any batch and sequence up to the maxima run on one engine."""
        import paddle.inference as paddle_infer

        half = paddle_infer.PrecisionType.Half
        if spec.engine == "paddle-trt":
            config.enable_use_gpu(256, 0)
            config.enable_tensorrt_engine(
                workspace_size=1 << 30, max_batch_size=TRT_MAX_BATCH, min_subgraph_size=3, precision_mode=half,
                use_static=False, use_calib_mode=False,
            )  # fmt: skip
            names = ("input_ids", "token_type_ids")
            config.set_trt_dynamic_shape_info(
                {n: [1, 1] for n in names}, {n: [TRT_MAX_BATCH, TRT_MAX_SEQUENCE] for n in names},
                {n: list(TRT_OPT) for n in names},
            )  # fmt: skip
        elif spec.precision == "fp16":
            config.enable_use_gpu(256, 0, half)
        else:
            config.enable_use_gpu(256, 0)

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        for name, array in feeds(self._inputs, input_ids, token_type_ids).items():
            self._inputs[name].reshape(list(array.shape))
            self._inputs[name].copy_from_cpu(array)
        self._predictor.run()
        return np.asarray(self._output.copy_to_cpu(), dtype=np.float32)


class OnnxRuntimeEngine:
    """ONNX Runtime, CPU execution provider, on `model.onnx` or `model.int8.onnx`."""

    def __init__(self, spec: Variant, model_dir: Path, threads: int) -> None:
        import onnxruntime as ort

        self.name, self.threads = spec.name, threads
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1  # one sequential graph: a second pool would only compete for the cores
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # ONNX Runtime's workers spin between parallel regions and after a run by default. Behind the model server
        # on a small node they then take the CPUs from the event loop and the other requests' work: with spinning
        # off, 16-client served throughput of the int8 medium model rose from 0.93x to 0.96x of in-process, and its
        # absolute texts/s by 6 % (docs/benchmarks.md, "Engines").
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(model_dir / spec.files[0]), options, providers=["CPUExecutionProvider"]
        )
        self._input_names = [i.name for i in self._session.get_inputs()]

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        logits = self._session.run(None, feeds(self._input_names, input_ids, token_type_ids))[0]
        return np.asarray(logits, dtype=np.float32)


class OpenVinoEngine:
    """OpenVINO on the CPU plugin, latency hint, on the variant's IR: `openvino/model.xml` at bf16 inference
    precision, or `openvino-int8/model.xml`, whose quantised MatMuls run in int8 and the rest in fp32."""

    def __init__(self, spec: Variant, model_dir: Path, threads: int) -> None:
        import openvino as ov
        import openvino.properties as props
        import openvino.properties.hint as hints

        self.name, self.threads = spec.name, threads
        # int8: the IR says which ops run in int8 (its quantise/dequantise pairs); the others keep fp32's accuracy.
        precision = {"bf16": ov.Type.bf16, "fp32": ov.Type.f32, "int8": ov.Type.f32}[spec.precision]
        config: dict[Any, Any] = {
            hints.performance_mode: hints.PerformanceMode.LATENCY,  # one stream: every thread on one request
            props.inference_num_threads: threads,
            hints.inference_precision: precision,
        }
        self._compiled = ov.Core().compile_model(str(model_dir / spec.files[0]), "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._input_names = [port.any_name for port in self._compiled.inputs]

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        self._request.infer(feeds(self._input_names, input_ids, token_type_ids))
        # A copy: the output tensor's memory belongs to the request and the next call overwrites it.
        return np.array(self._request.get_output_tensor(0).data, dtype=np.float32, copy=True)
