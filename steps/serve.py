"""Serve the ERNIE classifier over KServe's Open Inference Protocol (v1 and v2 REST).

Locally it binds `serving.host` (127.0.0.1) on `serving.port` (0 picks a free port) and, once
listening, writes `--ready-file` with the URL so the rollout step can find it. In the
InferenceService container it runs with `--host 0.0.0.0 --port 8080`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import config_names, runner
from steps.runtime.runner import StepError
from steps.runtime.serving import model_server as serving


def _arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--model-uri",
        default=os.environ.get("STORAGE_URI"),
        help="published model version (s3:// or local store path); verified against its manifest. Env STORAGE_URI.",
    )
    source.add_argument("--model-dir", default=None, help="an exported model directory used as is (dev/tests)")
    parser.add_argument("--host", default=None, help="bind address (default: serving.host)")
    parser.add_argument("--port", type=int, default=None, help="port (default: serving.port; 0 picks a free one)")
    parser.add_argument("--model-name", default=None, help="name in the URL (default: serving.model_name)")
    parser.add_argument("--ready-file", default=None, help="write {url, port, pid} here once listening")


def _write_ready_file(path: str, host: str, port: int, model_name: str) -> None:
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"url": url, "port": port, "pid": os.getpid(), "model_name": model_name}, fh)
    # Atomic rename: the rollout step polls this file and must never read it half-written.
    os.replace(tmp, path)


def run(cfg: PipelineConfig, args: argparse.Namespace) -> None:
    if not args.model_uri and not args.model_dir:
        raise StepError("no model given: pass --model-uri URI (or env STORAGE_URI) or --model-dir DIR")
    host = args.host or cfg.serving.host
    port = cfg.serving.port if args.port is None else args.port
    name = args.model_name or config_names.served_model(cfg)
    model = serving.ErnieModel(
        name, cfg.serving, model_uri=args.model_uri, model_dir=args.model_dir, endpoint_url=cfg.storage.endpoint_url
    )
    try:
        # Integrity failures (objectstore.IntegrityError) are StepErrors: one line, exit 2.
        model.load()
    except FileNotFoundError as exc:
        raise StepError(
            f"model files missing: {exc}. Check --model-uri/--model-dir points at an exported model."
        ) from None
    try:
        sock = serving.bind_socket(host, port)
    except OSError as exc:
        raise StepError(
            f"cannot listen on {host}:{port}: {exc.strerror}. Pick another --port (0 = any free)."
        ) from None
    bound_port = sock.getsockname()[1]
    app = serving.create_app([model], cfg.serving.max_request_bytes)
    threads = getattr(model.classifier, "cpu_threads", None)
    engine = getattr(model.classifier, "engine_name", "?")
    fallback = getattr(model.classifier, "fallback", "")
    runner.log.info(
        "serving model %s on http://%s:%d: engine %s, %s threads%s", name, host, bound_port, engine, threads or "?",
        f" (fell back: {fallback})" if fallback else "",
    )  # fmt: skip

    def started() -> None:
        if args.ready_file:
            _write_ready_file(args.ready_file, host, bound_port, name)

    serving.serve(app, sock, on_started=started)


STEP = runner.Step("serve", __doc__, run, _arguments)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
