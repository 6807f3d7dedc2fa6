"""Upload benchmark: `objectstore.publish` (multipart, parallel parts) against one PUT per file.

A model of at least 256 MiB (one random `inference.pdiparams` plus the small files an export has)
goes to moto's standalone S3 server (`python -m moto.server`) on 127.0.0.1, once with `publish` (the upload step's code,
`objectstore.DEFAULT_TRANSFER`) and once with `put_object` of each whole file, alternating over
`--rounds` so both see the same machine load. Then it publishes the same version again, and the
same content under a new version, to show that neither sends a byte.

    python -m benchmarks.upload              # 256 MiB model (~1-2 minutes on 2 cores)
    python -m benchmarks.upload --quick      # 8 MiB smoke run with small parts
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The steps' code is imported where it is used (benchmarks/__init__.py says why).
from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results

MIB = 1024 * 1024
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
BUCKET = "bench-models"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("upload", __doc__)
    parser.add_argument(
        "--size-mib", type=int, default=None, help="size of the params file (default 256; 8 with --quick)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternating publish/put rounds (default 2)")
    args = parse_benchmark_args(parser, argv, quick_help="smoke run: small model, small parts")
    if args.size_mib is None:
        args.size_mib = 8 if args.quick else 256
    if args.size_mib < 1 or args.rounds < 1:
        parser.error("--size-mib and --rounds must be at least 1")
    return args


def make_model(directory: Path, size_mib: int) -> int:
    """Random bytes (incompressible, unique per run) laid out like an export; returns total bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "inference.pdiparams", "wb") as fh:
        for _ in range(size_mib):
            fh.write(os.urandom(MIB))
    (directory / "inference.json").write_bytes(os.urandom(MIB))
    for name in ("vocab.txt", "tokenizer_config.json", "label_map.json", "model_config.json"):
        (directory / name).write_bytes(os.urandom(16 * 1024))
    return sum(p.stat().st_size for p in directory.iterdir())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def moto_server(work: Path) -> Iterator[str]:
    """moto's standalone S3 server as its own process on 127.0.0.1 (so client and server do not
    share one interpreter lock), with dummy credentials in the environment; stopped on exit."""
    os.environ.update(DUMMY_CREDENTIALS)
    for key in ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"):
        os.environ.pop(key, None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = work / "moto.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode}: {log_path.read_text()[-1000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start listening within 60s") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def put_each(client: Any, model_dir: Path, prefix: str) -> int:
    """The baseline: one put_object per whole file."""
    sent = 0
    for path in sorted(model_dir.iterdir()):
        with open(path, "rb") as fh:
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.name}", Body=fh)
        sent += path.stat().st_size
    return sent


def _publish(model_dir: Path, root: str, version: str, endpoint: str, transfer: Any) -> Any:
    """The upload step's `objectstore.publish` of `model_dir` as `version` under `root`, without progress bars."""
    from steps.runtime.storage import objectstore

    return objectstore.publish(
        model_dir, root, "bench", version, endpoint_url=endpoint, progress=False, transfer_config=transfer
    )


def _hashing_seconds(model_dir: Path) -> float:
    """The local sha256 of every file, the part of each publish that sends nothing."""
    from steps.runtime.storage import objectstore

    start = time.perf_counter()
    for path in model_dir.iterdir():
        objectstore.sha256_file(path)
    return time.perf_counter() - start


def _alternate(client: Any, model_dir: Path, endpoint: str, transfer: Any, rounds: int) -> dict[str, float]:
    """MiB/s of `publish` and of one put_object per file, alternating rounds so both see the same load."""
    times = {"publish": 0.0, "put_object": 0.0}
    sent = {"publish": 0, "put_object": 0}
    for r in range(rounds):
        # A fresh store root per round: objects are content-addressed, and a second publish
        # into the same root would rightly skip them.
        start = time.perf_counter()
        result = _publish(model_dir, f"s3://{BUCKET}/publish-{r}", "v1", endpoint, transfer)
        times["publish"] += time.perf_counter() - start
        sent["publish"] += result.bytes_sent
        start = time.perf_counter()
        sent["put_object"] += put_each(client, model_dir, f"put-{r}")
        times["put_object"] += time.perf_counter() - start
    return {name: sent[name] / MIB / times[name] for name in times}


def _report(figures: dict[str, Any], files: int) -> None:
    transfer = figures["transfer"]
    print(
        f"model: {figures['model_bytes'] / MIB:.1f} MiB in {files} files; {figures['rounds']} rounds; "
        f"{os.cpu_count()} CPUs; moto S3 server on 127.0.0.1"
    )
    print(
        f"transfer: threshold {transfer['multipart_threshold'] // MIB} MiB, "
        f"parts {transfer['multipart_chunksize'] // MIB} MiB, {transfer['max_concurrency']} threads"
    )
    print(f"publish (multipart):  {figures['publish_mib_s']:8.1f} MiB/s  (includes hashing and verification)")
    print(f"  of which local sha256 of every file: {figures['hashing_seconds_per_publish']:.2f} s per publish")
    print(f"put_object per file:  {figures['put_object_mib_s']:8.1f} MiB/s")
    print(f"upload ratio: {figures['ratio']:.2f}")
    print(f"re-run of the same version sent {figures['rerun_bytes_sent']} bytes")
    print(
        f"same content as a new version sent {figures['new_version_bytes_sent']} bytes "
        f"({figures['new_version_objects_skipped']} objects already stored)"
    )


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from boto3.s3.transfer import TransferConfig

    from steps.runtime.storage import objectstore, s3

    model_dir = work / "model"
    total = make_model(model_dir, args.size_mib)
    # --quick keeps the multipart path: parts small enough that an 8 MiB file has several.
    transfer = (
        TransferConfig(multipart_threshold=MIB, multipart_chunksize=MIB, max_concurrency=8) if args.quick else None
    )
    chosen = transfer or objectstore.DEFAULT_TRANSFER
    hashing = _hashing_seconds(model_dir)
    with moto_server(work) as endpoint:
        client = s3.client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        rates = _alternate(client, model_dir, endpoint, transfer, args.rounds)
        again = _publish(model_dir, f"s3://{BUCKET}/publish-0", "v1", endpoint, transfer)
        new_version = _publish(model_dir, f"s3://{BUCKET}/publish-0", "v2", endpoint, transfer)

    figures = {
        "model_bytes": total,
        "rounds": args.rounds,
        "transfer": {
            "multipart_threshold": chosen.multipart_threshold,
            "multipart_chunksize": chosen.multipart_chunksize,
            "max_concurrency": chosen.max_concurrency,
        },
        "publish_mib_s": rates["publish"],
        "put_object_mib_s": rates["put_object"],
        "ratio": rates["publish"] / rates["put_object"],
        "hashing_seconds_per_publish": hashing,
        "rerun_bytes_sent": again.bytes_sent,
        "new_version_bytes_sent": new_version.bytes_sent,
        "new_version_objects_skipped": new_version.skipped,
    }
    _report(figures, len(list(model_dir.iterdir())))
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
        figures = measure(args, Path(tmp))
    write_results(args.json_out, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
