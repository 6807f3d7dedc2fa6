"""The engine variants of an exported ERNIE model, and `build_variants`, which writes their files beside the export.

A variant is one engine at one precision. The Paddle ones run the export itself (`paddle-bf16` is a runtime
setting); the others are converted from it: `model.onnx` (paddle2onnx), `model.int8.onnx` (ONNX Runtime's
dynamic quantisation of `model.onnx`), `openvino/model.xml` + `.bin` (OpenVINO IR of `model.onnx`) and
`openvino-int8/model.xml` + `.bin` (OpenVINO IR of `model.onnx` statically quantised to int8, calibrated on
batches the caller gives: evaluate gives the dev split).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from steps.runtime.serving.engines import convert
from steps.runtime.serving.engines.inputs import Batch

PADDLE_FP32 = "paddle-fp32"
PADDLE_BF16 = "paddle-bf16"
ONNX_FP32 = "onnx-fp32"
ONNX_INT8 = "onnx-int8"
OPENVINO_BF16 = "openvino-bf16"
OPENVINO_INT8 = "openvino-int8"
VARIANTS = (PADDLE_FP32, PADDLE_BF16, ONNX_FP32, ONNX_INT8, OPENVINO_BF16, OPENVINO_INT8)
# On a GPU node (serving.use_gpu): Paddle Inference fp32 and fp16 on CUDA, and its TensorRT subgraph engine at fp16
# where the image's Paddle is built with TensorRT. All run the export itself.
PADDLE_GPU_FP32 = "paddle-gpu-fp32"
PADDLE_GPU_FP16 = "paddle-gpu-fp16"
PADDLE_TRT_FP16 = "paddle-trt-fp16"
GPU_VARIANTS = (PADDLE_GPU_FP32, PADDLE_GPU_FP16, PADDLE_TRT_FP16)

PADDLE_MODEL = "inference.json"
PADDLE_PARAMS = "inference.pdiparams"
ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
OPENVINO_XML = "openvino/model.xml"
OPENVINO_BIN = "openvino/model.bin"
OPENVINO_INT8_XML = "openvino-int8/model.xml"
OPENVINO_INT8_BIN = "openvino-int8/model.bin"
# What build_variants built from which export, so that a second call with the same export does nothing.
RECORD_FILE = "variants.json"

# /proc/cpuinfo flags. bf16 runs fast only with native bf16 instructions (elsewhere Paddle and OpenVINO fall
# back to fp32 or emulate); int8 without VNNI runs slower and rounds differently (u8 activations saturate).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


@dataclass(frozen=True)
class Variant:
    """One engine at one precision: what runs it, the files it needs and what it needs of the CPU."""

    name: str
    engine: str  # the runtime, also the Python package that runs it: "paddle", "onnxruntime", "openvino"
    precision: str  # "fp32", "bf16", "int8"
    files: tuple[str, ...]  # relative to the model directory
    cpu_needs: tuple[tuple[str, ...], ...] = ()  # one flag of each group
    built_from: str | None = None  # the variant whose files this one is converted from
    tools: tuple[str, ...] = ()  # the distributions its conversion uses; a new version rebuilds it
    device: str = "cpu"  # "gpu": CUDA (the GPU variants)
    calibrated: bool = False  # its conversion observes the model on calibration batches (static quantisation)


_PADDLE = (PADDLE_MODEL, PADDLE_PARAMS)
SPECS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(PADDLE_FP32, "paddle", "fp32", _PADDLE),
        Variant(PADDLE_BF16, "paddle", "bf16", _PADDLE, cpu_needs=(BF16_FLAGS,)),
        Variant(ONNX_FP32, "onnxruntime", "fp32", (ONNX_FILE,), tools=("paddlepaddle", "paddle2onnx", "onnxruntime")),
        Variant(
            ONNX_INT8,
            "onnxruntime",
            "int8",
            (INT8_FILE,),
            cpu_needs=(VNNI_FLAGS,),
            built_from=ONNX_FP32,
            tools=("onnxruntime",),
        ),
        Variant(
            OPENVINO_BF16,
            "openvino",
            "bf16",
            (OPENVINO_XML, OPENVINO_BIN),
            cpu_needs=(BF16_FLAGS,),
            built_from=ONNX_FP32,
            tools=("openvino",),
        ),
        Variant(
            OPENVINO_INT8,
            "openvino",
            "int8",
            (OPENVINO_INT8_XML, OPENVINO_INT8_BIN),
            cpu_needs=(VNNI_FLAGS,),
            built_from=ONNX_FP32,
            tools=("onnxruntime", "openvino"),
            calibrated=True,
        ),
        Variant(PADDLE_GPU_FP32, "paddle", "fp32", _PADDLE, device="gpu"),
        Variant(PADDLE_GPU_FP16, "paddle", "fp16", _PADDLE, device="gpu"),
        Variant(PADDLE_TRT_FP16, "paddle-trt", "fp16", _PADDLE, device="gpu"),
    )
}
assert tuple(SPECS) == VARIANTS + GPU_VARIANTS

# How each converted variant is made: (export dir, output dir, work dir, calibration batches) -> its files written
# into the work dir.
CONVERTERS: dict[str, Callable[[Path, Path, Path, Sequence[Batch]], None]] = {
    ONNX_FP32: lambda export, out, work, _: convert.paddle_to_onnx(
        export / PADDLE_MODEL, export / PADDLE_PARAMS, work / ONNX_FILE
    ),
    ONNX_INT8: lambda export, out, work, _: convert.quantize_int8(out / ONNX_FILE, work / INT8_FILE),
    OPENVINO_BF16: lambda export, out, work, _: convert.onnx_to_openvino(out / ONNX_FILE, work / OPENVINO_XML),
    OPENVINO_INT8: lambda export, out, work, batches: convert.quantize_static_int8(
        out / ONNX_FILE, work / OPENVINO_INT8_XML, batches
    ),
}


def variant_spec(name: str) -> Variant:
    """The `Variant` called `name`; ValueError naming the known ones otherwise."""
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown engine variant {name!r}; known: {', '.join(VARIANTS)}") from None


class BuiltVariants(dict[str, list[str]]):
    """Variant name -> its files that `build_variants` wrote (relative to the output directory; none for the
    Paddle variants, which run the export itself), for every variant that is ready; `skipped` holds the
    reason for each one that is not."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped: dict[str, str] = {}


def build_variants(
    model_dir: Path, out_dir: Path | None = None, calibration: Sequence[Batch] | None = None, int8: bool = True
) -> BuiltVariants:
    """Convert the Paddle export in `model_dir` into every variant's files, in `out_dir` (default: beside it).

    `calibration`: batches of model inputs the statically quantised variant observes to fix its activations'
    ranges (a sample of the data the model will see; evaluate gives the dev split); without them that variant
    is skipped. `int8=False` skips the int8 variants (and deletes their files). One variant failing (a package
    missing, a conversion error) skips it and those built from it, with the reason, and keeps the others.
    Idempotent: a variant built before from the same export by the same tool versions (and on the same
    calibration batches), whose files are unchanged, is not converted again.
    """
    model_dir = Path(model_dir)
    out_dir = Path(out_dir) if out_dir is not None else model_dir
    absent = [name for name in (PADDLE_MODEL, PADDLE_PARAMS) if not (model_dir / name).is_file()]
    if absent:
        raise FileNotFoundError(f"{model_dir} has no {', '.join(absent)}: it is not a Paddle export")
    out_dir.mkdir(parents=True, exist_ok=True)
    source = _digest_files(model_dir, (PADDLE_MODEL, PADDLE_PARAMS))
    before = _read_record(out_dir)
    earlier = before.get("variants", {}) if before.get("source") == source else {}
    record: dict[str, dict] = {}
    built = BuiltVariants()
    rebuilt: set[str] = set()
    observed = _digest_batches(calibration) if calibration else None
    for spec in (SPECS[name] for name in VARIANTS):
        if spec.name not in CONVERTERS:
            built[spec.name] = []  # runs the export itself
            continue
        unwanted = _not_to_build(spec, built, int8, observed is not None)
        if unwanted is not None:
            built.skipped[spec.name] = unwanted
            _remove(out_dir, spec.files)
            continue
        tools = {dist: _version(dist) for dist in spec.tools}
        # a calibrated variant without calibration inputs was skipped above (_not_to_build)
        inputs = {"calibration": observed} if spec.calibrated and observed is not None else {}
        entry: dict = earlier.get(spec.name) or {}
        if spec.built_from in rebuilt or not _current(entry, tools, out_dir, inputs):
            reason = _convert(spec, model_dir, out_dir, calibration or ())
            if reason is not None:
                built.skipped[spec.name] = reason
                continue
            rebuilt.add(spec.name)
            files = {name: _digest_files(out_dir, (name,)) for name in spec.files}
            entry = {"tools": tools, "files": files, **inputs}
        record[spec.name] = entry
        built[spec.name] = list(spec.files)
    _write_record(out_dir, {"source": source, "variants": record}, before)
    return built


def _not_to_build(spec: Variant, built: BuiltVariants, int8: bool, calibrated: bool) -> str | None:
    """Why `spec` is not built this time (its files, if any, are then deleted); None when it is."""
    if spec.built_from is not None and spec.built_from not in built:
        return f"it is converted from {spec.built_from}, which was skipped"
    if spec.precision == "int8" and not int8:
        return "int8 variants were not asked for"
    if spec.calibrated and not calibrated:
        return "it is calibrated on model inputs, and none were given"
    return None


def _convert(spec: Variant, model_dir: Path, out_dir: Path, calibration: Sequence[Batch]) -> str | None:
    """Build `spec`'s files in a scratch directory and move them into `out_dir`; the reason if it failed."""
    work = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=out_dir))
    try:
        CONVERTERS[spec.name](model_dir, out_dir, work, calibration)
        for name in spec.files:
            (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(work / name, out_dir / name)
    except ImportError as exc:
        _remove(out_dir, spec.files)
        return f"the {exc.name or spec.engine} package is not installed ({exc})"
    except Exception as exc:  # any converter error skips this variant only, with its reason
        _remove(out_dir, spec.files)
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _digest_files(directory: Path, names: tuple[str, ...]) -> str:
    """sha256 over the named files, in order."""
    digest = hashlib.sha256()
    for name in names:
        with open(directory / name, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()


def _digest_batches(batches: Sequence[Batch]) -> str:
    """sha256 over the batches' shapes and values, in order."""
    digest = hashlib.sha256()
    for batch in batches:
        for array in batch:
            array = np.ascontiguousarray(array, dtype=np.int64)
            digest.update(repr(array.shape).encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def _current(entry: dict, tools: dict[str, str | None], out_dir: Path, inputs: dict[str, str]) -> bool:
    """Whether a recorded build was made by these tool versions (from these calibration inputs) and its files are
    still as it wrote them."""
    files = entry.get("files") or {}
    return (
        bool(files)
        and entry.get("tools") == tools
        and all(entry.get(key) == value for key, value in inputs.items())
        and all((out_dir / name).is_file() and _digest_files(out_dir, (name,)) == sha for name, sha in files.items())
    )


def _remove(out_dir: Path, names: tuple[str, ...]) -> None:
    """Delete a variant's files: stale or partial ones must not be opened as if they were current."""
    for name in names:
        path = out_dir / name
        path.unlink(missing_ok=True)
        if path.parent != out_dir and path.parent.is_dir() and not any(path.parent.iterdir()):
            path.parent.rmdir()  # the variant's own folder (openvino-int8/), left empty


def _read_record(out_dir: Path) -> dict:
    try:
        record = json.loads((out_dir / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(out_dir: Path, record: dict, before: dict) -> None:
    if record == before:
        return  # nothing changed: a rerun writes nothing
    tmp = out_dir / f".{RECORD_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / RECORD_FILE)
