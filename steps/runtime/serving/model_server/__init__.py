"""The ERNIE model server: a `kserve.Model` predictor with dynamic batching, input checks and metrics.

- `inputs`: the texts of a V1/V2 request, checked against `serving.*` limits
- `batcher`: `DynamicBatcher`, concurrent requests merged into one model call
- `model`: `ErnieModel`, the `kserve.Model` over Paddle Inference
- `v1_predict`: the V1 fast path ahead of FastAPI and kserve's DataPlane
- `versions`: OIP's versioned V2 paths for the version a model serves
- `guard`: body-size limit and request metrics (`metrics`: the Prometheus series)
- `app`: `create_app`, KServe's REST endpoints assembled around the above
- `server`: `bind_socket`, `serve`, uvicorn on a pre-bound socket
"""

from __future__ import annotations

import sys

# kserve.model_server parses sys.argv when it is imported (parse_known_args at module level), and
# argparse's prefix matching reads our `--config FILE` as its `--configure_logging`: hide ours.
# Every module of this package imports kserve only after this guard (a package runs first).
_argv, sys.argv = sys.argv, sys.argv[:1]
try:
    from steps.runtime.serving.model_server.app import create_app
    from steps.runtime.serving.model_server.batcher import DynamicBatcher
    from steps.runtime.serving.model_server.inputs import Limits
    from steps.runtime.serving.model_server.model import ErnieModel
    from steps.runtime.serving.model_server.server import bind_socket, run_server, serve, uvicorn_server
finally:
    sys.argv = _argv

__all__ = [
    "DynamicBatcher",
    "ErnieModel",
    "Limits",
    "bind_socket",
    "create_app",
    "run_server",
    "serve",
    "uvicorn_server",
]
