"""`paddle-mlops publish DIR`: publish an exported model directory from anywhere; its notification rolls it out.

The directory is what the train step exports (`inference.json`, `inference.pdiparams`, `label_map.json`,
`model_config.json` and the tokenizer files), trained by this pipeline or anywhere else. It is published to the
configured store like the upload step does (content-addressed objects, the manifest last), under the
configured model name and a version (default: `ext-` + the first 12 hex digits of the content digest, so
publishing the same files again is the same version). Then:

- on a cluster store (`serving.target: kserve`) MinIO notifies Argo Events, whose `rollout-on-publish`
  Sensor submits `rollout`: nothing more to do here;
- on the local store or any S3 endpoint of a local configuration (`serving.target: local`) nothing listens to
  the store, so this command makes the same notification, hands it to the same Sensor and runs the `rollout`
  workflow it starts (validate, register, rollout) on this machine. `--no-rollout` only publishes.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from paddle_mlops.command_line import add_config_args, exit_status
from paddle_mlops.local.executor import LocalExecutor, RunOptions
from paddle_mlops_core.config import ConfigError, PipelineConfig, load_config
from paddle_mlops_core.config.loader import default_config_path
from paddle_mlops_core.contracts import DEFAULT_HOME, EXIT_FAILED, EXIT_USAGE, EXPORTED_FILES, HOME_ENV


class PublishError(Exception):
    """The directory or the version cannot be published; nothing was written."""


class StoreUnreachable(Exception):
    """The object store refused or could not be reached; no manifest was written, so nothing is published."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paddle-mlops publish", description=__doc__.split("\n\n")[0].split(": ", 1)[1]
    )
    parser.add_argument("model_dir", type=Path, metavar="DIR", help="an exported model directory")
    parser.add_argument("--version", default=None, help="version name (default: ext-<content digest[:12]>)")
    parser.add_argument("--no-rollout", action="store_true", help="publish only; start no local rollout")
    parser.add_argument("--workdir", type=Path, default=Path(DEFAULT_HOME), help="local state (default .paddle-mlops/)")
    add_config_args(parser, "local")
    return parser


def check_model_dir(model_dir: Path) -> Path:
    if not model_dir.is_dir():
        raise PublishError(f"{model_dir} is not a directory; give the directory the train step exported")
    missing = [name for name in EXPORTED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise PublishError(
            f"{model_dir} is not an exported model: {', '.join(missing)} missing "
            f"(an export has {', '.join(EXPORTED_FILES)} and the tokenizer files)"
        )
    return model_dir.resolve()


def content_version(model_dir: Path) -> str:
    """`ext-` + 12 hex digits of a digest over every file's path and sha256: the same files, the same version."""
    from steps.runtime.storage.objectstore.manifest import file_entries  # the manifest's own entries, hashed streaming

    digest = hashlib.sha256()
    for entry in file_entries(model_dir):
        digest.update(entry["path"].encode() + b"\0")
        digest.update(bytes.fromhex(entry["sha256"]))
    return f"ext-{digest.hexdigest()[:12]}"


def publish(cfg: PipelineConfig, model_dir: Path, version: str | None) -> str:
    """Publish `model_dir`; the model URI."""
    from botocore.exceptions import BotoCoreError, ClientError

    from paddle_mlops.local import notify
    from steps.runtime.runner import StepError
    from steps.runtime.storage import objectstore
    from steps.runtime.storage.objectstore import notifications

    version = version or content_version(model_dir)
    registered_model = cfg.mlflow.registered_model
    assert registered_model is not None  # task_rules.fill_defaults sets it (ernie-<task>) when the files leave it out
    try:
        notifications.check_name("--version", version)
        result = objectstore.publish(
            model_dir,
            cfg.storage.uri,
            registered_model,
            version,
            {"published_by": getpass.getuser(), "source": str(model_dir)},
            endpoint_url=notify.endpoint_url(cfg),
            progress=sys.stderr.isatty(),
        )
    except StepError as exc:
        raise PublishError(str(exc)) from None
    except (BotoCoreError, ClientError) as exc:
        where = notify.endpoint_url(cfg) or "the AWS default endpoint"
        raise StoreUnreachable(
            f"cannot publish to {cfg.storage.uri} at {where}: {exc}. Check storage.endpoint_url (or S3_ENDPOINT_URL), "
            "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY credentials and that the bucket exists"
        ) from None
    print(f"published {result.model_uri} (manifest sha256 {result.manifest_digest})")
    return result.model_uri


def _roll_out_here(cfg: PipelineConfig, args: argparse.Namespace, model_uri: str, console: Console) -> int:
    """The local rollout the notification starts, as `paddle-mlops run` starts it after its upload."""
    from paddle_mlops.local import notify
    from pipelines import rollout_template

    params = notify.rollout_parameters(cfg, notify.notification(cfg, model_uri))
    if params is None:
        print(f"the notification for {model_uri} does not pass the rollout sensor's filters: nothing started")
        return 0
    opts = RunOptions(
        config_path=args.config or default_config_path(),
        env=args.env,
        overrides=list(args.overrides),
        workdir=args.workdir,
        parameters=params,
        summary_name="last-publish.json",
    )
    doc = rollout_template.build(cfg).to_dict()
    code, _ = LocalExecutor(cfg, doc, opts, console, results=rollout_template.RESULTS).run()
    return code


def _publish(args: argparse.Namespace, console: Console) -> int:
    cfg = load_config(args.config or default_config_path(), args.env, args.overrides, task=args.task)
    model_dir = check_model_dir(args.model_dir)
    os.environ[HOME_ENV] = str(args.workdir.resolve())  # the local store, as `run` sets it for its steps
    model_uri = publish(cfg, model_dir, args.version)
    if args.no_rollout:
        return 0
    if cfg.serving.target != "local":
        print("MinIO's notification starts the `rollout` workflow on the cluster (Sensor rollout-on-publish).")
        return 0
    return _roll_out_here(cfg, args, model_uri, console)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=True)
    errors = (
        (ConfigError, EXIT_USAGE, "configuration error: {exc}"),
        (PublishError, EXIT_USAGE, "paddle-mlops publish: {exc}"),
        (StoreUnreachable, EXIT_FAILED, "paddle-mlops publish: {exc}"),
    )
    return exit_status(lambda: _publish(args, console), errors)


if __name__ == "__main__":
    sys.exit(main())
