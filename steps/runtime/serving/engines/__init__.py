"""CPU inference engines for an exported ERNIE model: Paddle Inference (fp32, bf16), ONNX Runtime (fp32,
dynamic int8) and OpenVINO (bf16, static int8).

`variants` names them and builds their files beside the Paddle export (`build_variants`), `cpu` says what a
node lacks to run one, `runners` opens one as an `Engine` (`open_engine`), `inputs` makes a graph's named inputs
from a batch of token ids, and `measure` times it. Importing
this package loads no inference runtime: each is imported where it is first used.
"""
