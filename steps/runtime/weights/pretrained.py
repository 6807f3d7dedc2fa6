"""Pretrained ERNIE weights by PaddleNLP name: staged once into the object store, resolved per run, verified.

`paddle-mlops weights stage NAME` saves model + tokenizer with PaddleNLP's own `save_pretrained` (from a hub
download or a directory) and publishes the files content-addressed, manifest last, to
`<region store>/pretrained/<NAME>/<digest>/` of every region the configuration trains in (the weights are
replicated to where they are read). prepare-data resolves the name to the newest staged digest in the run's
region store and writes `data/pretrained.json`; the train step fetches exactly that digest, checks every
file against its manifest and trains on nothing that differs. Only where nothing is staged and
`model.allow_download` is set does the train step download through PaddleNLP.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.pretrained_names import paddlenlp_version
from paddle_mlops_core.contracts import PRETRAINED_PREFIX, PRETRAINED_RECORD, REGION_ENV
from steps.runtime.runner import StepError
from steps.runtime.storage import workspace
from steps.runtime.storage.objectstore import fetching, manifest
from steps.runtime.storage.objectstore.backends import Backend, open_backend, resolve_root
from steps.runtime.storage.objectstore.manifest import IntegrityError
from steps.runtime.storage.objectstore.publishing import PublishResult, publish
from steps.runtime.storage.region_stores import of_region

log = logging.getLogger("steps.pretrained")
KIND = "pretrained-weights"


@dataclass(frozen=True)
class WeightsStore:
    """Where one region's staged weights live: `<store>/pretrained`."""

    uri: str
    endpoint_url: str | None = None
    region: str | None = None
    exact: bool = False  # the region's own endpoint: S3_ENDPOINT_URL (the default store's) does not override it
    credentials: str | None = None  # the region whose own keys sign (s3.client); None: the default credentials

    @property
    def root(self) -> str:
        """The object store the weights area is in (what `weights stage --to` takes)."""
        return self.uri.rstrip("/").rsplit("/", 1)[0]

    def version_uri(self, name: str, digest: str) -> str:
        return workspace.join(self.uri, name, digest)


@dataclass(frozen=True)
class Staged:
    """One staged copy: its name, digest and manifest."""

    store: WeightsStore
    name: str
    digest: str
    manifest: dict[str, Any]
    manifest_sha256: str

    @property
    def created(self) -> str:
        """When it was staged (microseconds: two stages within a second still order); the manifest's own
        `created` for a copy without it."""
        return str(self.manifest.get("staged_at") or self.manifest.get("created", ""))

    @property
    def size(self) -> int:
        return sum(int(f["size"]) for f in self.manifest["files"])


def weights_store(
    uri: str,
    endpoint_url: str | None = None,
    region: str | None = None,
    exact: bool = False,
    credentials: str | None = None,
) -> WeightsStore:
    """The weights area of the object store at `uri` ('local', a directory or s3://bucket/prefix)."""
    return WeightsStore(workspace.join(resolve_root(uri), PRETRAINED_PREFIX), endpoint_url, region, exact, credentials)


def region_stores(cfg: PipelineConfig, region: str | None = None) -> list[WeightsStore]:
    """The stores a run reads weights from, first the one of the region it runs in: `region`, else
    $PADDLE_MLOPS_REGION (set where the pipeline pins the region), else the regions its training may be
    admitted in, in the team's preference order. A region without a `store` uses storage.uri
    (steps/runtime/storage/region_stores.py of_region: its endpoint and credentials too)."""
    from paddle_mlops_core.config import ConfigError
    from paddle_mlops_core.config.loader import load_regions, load_teams
    from paddle_mlops_core.config.placement import allowed_regions

    regions = load_regions()
    region = region or os.environ.get(REGION_ENV) or None
    if region is not None:
        if region not in regions:
            raise StepError(f"region {region!r} ({REGION_ENV}) is not one of configs/regions/: {', '.join(regions)}")
        chosen = [regions[region]]
    else:
        try:
            chosen = allowed_regions(cfg, load_teams()[cfg.cluster.team], regions)
        except (ConfigError, KeyError):
            chosen = []
    stores: list[WeightsStore] = []
    for r in chosen:
        place = of_region(cfg, r)
        store = weights_store(place.root, place.endpoint_url, r.name, place.exact, place.credentials)
        if all((s.uri, s.endpoint_url) != (store.uri, store.endpoint_url) for s in stores):
            stores.append(store)
    return stores or [weights_store(cfg.storage.uri, cfg.storage.endpoint_url)]


# --- staging ---------------------------------------------------------------------------------------------------


def save_weights(name: str, source: Path | None, out: Path) -> Path:
    """Model + tokenizer saved into `out` by PaddleNLP's own save_pretrained; loaded from `source` (a directory
    saved with save_pretrained) or, without one, downloaded by PaddleNLP for `name`."""
    import paddle
    from paddlenlp.transformers import AutoModel, AutoTokenizer

    where = str(source) if source is not None else name
    if source is not None and not (source / "config.json").is_file():
        raise StepError(f"--from {source}: no config.json there; give a directory written by save_pretrained()")
    try:
        # Fresh parameter names: save_pretrained stores them, and the same weights must give the same bytes however
        # many models this process loaded before (a rerun then sends nothing).
        with paddle.utils.unique_name.guard():
            model = AutoModel.from_pretrained(where)
        tokenizer = AutoTokenizer.from_pretrained(where)
    except (OSError, ValueError, TypeError, KeyError, RuntimeError) as exc:  # PaddleNLP's errors for a bad copy
        how = f"from {source}" if source is not None else "from PaddleNLP's model hosting (this needs egress)"
        raise StepError(f"cannot load {name} {how}: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    with paddle.utils.unique_name.guard():
        model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def stage(
    name: str, stores: list[WeightsStore], source: Path | None = None, progress: bool = False
) -> list[tuple[WeightsStore, PublishResult]]:
    """Save `name`'s weights once and publish them to every store under their content digest; unchanged weights
    already staged send 0 bytes."""
    with tempfile.TemporaryDirectory(prefix="weights-") as tmp:
        local = save_weights(name, source, Path(tmp) / name)
        files = manifest.file_entries(local)
        digest = manifest.content_digest(files)
        config = json.loads((local / "config.json").read_text(encoding="utf-8"))
        metadata = {
            "kind": KIND,
            "pretrained": name,
            # what a run may ask of it before fetching it: inputs longer than this have no position embedding
            "max_position_embeddings": config.get("max_position_embeddings"),
            "paddlenlp_version": paddlenlp_version(),
            "source": str(source) if source is not None else "paddlenlp",
            "staged_by": getpass.getuser(),
            "staged_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        }
        return [
            (
                store,
                publish(
                    local,
                    store.uri,
                    name,
                    digest,
                    metadata,
                    store.endpoint_url,
                    progress,
                    repair=True,
                    exact=store.exact,
                    credentials=store.credentials,
                ),
            )
            for store in stores
        ]


# --- listing and resolution ------------------------------------------------------------------------------------


def _staged(store: WeightsStore, name: str, digest: str, backend: Backend | None = None) -> Staged | None:
    """The staged copy `digest` of `name` in `store` (read through `backend` when the caller has one open), None
    when its manifest is absent."""
    uri = store.version_uri(name, digest)
    backend = backend or open_backend(store.uri, store.endpoint_url, exact=store.exact, credentials=store.credentials)
    raw = backend.read(manifest.manifest_key(name, digest))
    if raw is None:
        return None  # objects without a manifest: a stage that never finished, not a staged copy
    doc = manifest.parse(raw, uri)
    return Staged(store, name, digest, doc, manifest.sha256_bytes(raw))


def list_staged(store: WeightsStore, name: str | None = None) -> list[Staged]:
    """Every staged copy in `store` (of `name` only, when given), oldest first."""
    backend = open_backend(store.uri, store.endpoint_url, exact=store.exact, credentials=store.credentials)
    names = [name] if name else [n for n in backend.children("") if n != manifest.OBJECTS.split("/")[0]]
    found = [s for n in names for d in backend.children(n) if (s := _staged(store, n, d, backend)) is not None]
    return sorted(found, key=lambda s: (s.name, s.created, s.digest))


def newest(store: WeightsStore, name: str) -> Staged | None:
    copies = list_staged(store, name)
    return copies[-1] if copies else None


def stage_command(name: str, store: WeightsStore) -> str:
    """The command that stages `name` into `store` (this project's own model is pre-trained, not downloaded)."""
    from paddle_mlops_core.config.pretrained_names import PROJECT_NAMES

    endpoint = f" --endpoint-url {store.endpoint_url}" if store.endpoint_url else ""
    action = "pretrain" if name in PROJECT_NAMES else "stage"
    return f"paddle-mlops weights {action} {name} --to {store.root}{endpoint}"


def resolve(cfg: PipelineConfig) -> dict[str, Any] | None:
    """What `model.pretrained` (a name) trains from, as the record prepare-data writes: the newest staged digest
    in the run's region store, a download, or the from-scratch model; None when it is not a name.
    StepError when the name is staged nowhere the run reads and neither fallback is allowed."""
    name = cfg.model.pretrained_name
    if name is None:
        return None
    stores = region_stores(cfg)
    for store in stores:
        staged = newest(store, name)
        if staged is not None:
            check_length(cfg, name, staged.manifest.get("max_position_embeddings"))
            return {
                "name": name,
                "digest": staged.digest,
                "store": store.uri,
                "endpoint_url": store.endpoint_url,
                "endpoint_exact": store.exact,
                "credentials": store.credentials,
                "region": store.region,
                "manifest_sha256": staged.manifest_sha256,
                "paddlenlp_version": staged.manifest.get("paddlenlp_version"),
                "staged": staged.created,
            }
    searched = ", ".join(s.uri for s in stores)
    if cfg.model.allow_download:
        return {"name": name, "download": True, "searched": searched}
    if cfg.model.scratch_if_unstaged:
        return {"name": name, "from_scratch": f"{name} is not staged in {searched}"}
    raise StepError(
        f"model.pretrained {name!r} is not staged in {searched}, and model.allow_download is false, so nothing "
        f"can be fine-tuned. Stage it once from a machine with egress: `{stage_command(name, stores[0])}` "
        "(or add --from DIR for a copy saved with save_pretrained), or set model.allow_download: true where the "
        "training pods may download"
    )


def check_length(cfg: PipelineConfig, name: str, positions: Any) -> None:
    """StepError when model.max_seq_len is longer than the pretrained model has position embeddings for."""
    if isinstance(positions, int) and cfg.model.max_seq_len > positions:
        raise StepError(
            f"model.max_seq_len {cfg.model.max_seq_len} is longer than {name} has positions for "
            f"(max_position_embeddings {positions}); set model.max_seq_len to at most {positions}"
        )


def write_record(data_dir: Path, record: dict[str, Any] | None) -> None:
    """`data/pretrained.json`, what the train step fetches; none (a stale one removed) when not a name."""
    path = data_dir / PRETRAINED_RECORD
    if record is None:
        path.unlink(missing_ok=True)
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")


def read_record(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / PRETRAINED_RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def trains_from_scratch(cfg: PipelineConfig, record: dict[str, Any] | None) -> bool:
    """Whether the run trains the small model on a character vocabulary: no weights configured, or a name that
    prepare-data found staged nowhere with `model.scratch_if_unstaged`."""
    return cfg.model.pretrained is None or bool(record and record.get("from_scratch"))


# --- use at train time -----------------------------------------------------------------------------------------


def _cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "paddle-mlops-pretrained"


def _verified_copy(target: Path, doc: dict[str, Any], uri: str) -> bool:
    """Whether `target` holds exactly the manifest's files, each with its size and sha256."""
    if not target.is_dir():
        return False
    listed = {f["path"] for f in doc["files"]}
    present = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    if present != listed:
        return False
    for entry in doc["files"]:
        manifest.verify_file(target / entry["path"], entry, uri)
    return True


def _nearest(cfg: PipelineConfig | None, record: dict[str, Any]) -> tuple[WeightsStore, Staged | None]:
    """The store to read the resolved digest from: this pod's region's (`$PADDLE_MLOPS_REGION`, set by a
    MultiKueue worker's runtime) when it holds the same digest, else the one prepare-data resolved it in."""
    name, digest = record["name"], record["digest"]
    resolved = WeightsStore(
        record["store"],
        record.get("endpoint_url"),
        record.get("region"),
        bool(record.get("endpoint_exact")),
        record.get("credentials"),
    )
    here = os.environ.get(REGION_ENV)
    if cfg is not None and here and here != resolved.region:
        local = region_stores(cfg, here)[0]
        if local.uri != resolved.uri or local.endpoint_url != resolved.endpoint_url:
            staged = _staged(local, name, digest)
            if staged is not None:
                return local, staged
            log.warning("%s %s is not staged in region %s (%s); reading it from %s, where prepare-data found it",
                        name, digest[:12], here, local.uri, resolved.uri)  # fmt: skip
    return resolved, _staged(resolved, name, digest)


def materialize(record: dict[str, Any], cfg: PipelineConfig | None = None) -> tuple[Path, dict[str, Any]]:
    """A local directory of the weights `record` names, every file checked against the staged manifest, and the
    provenance to record (name, digest, PaddleNLP version). Read from this region's store where it holds the same
    digest (content-addressed: the same bytes). Several processes of one job share one copy."""
    name = record["name"]
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the job's other processes wait for one fetch instead of racing it
        if record.get("download"):
            return _downloaded(name, cache)
        store, staged = _nearest(cfg, record)
        uri = store.version_uri(name, record["digest"])
        if staged is None:
            raise StepError(
                f"{uri} is not staged (prepare-data resolved {name} to it); stage the weights there again "
                f"({stage_command(name, store)}) and rerun from prepare-data"
            )
        target = cache / name / record["digest"]
        try:
            if not _verified_copy(target, staged.manifest, uri):
                fetching.fetch(
                    uri,
                    target,
                    store.endpoint_url,
                    published=staged.manifest,
                    exact=store.exact,
                    credentials=store.credentials,
                )
        except IntegrityError as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise IntegrityError(
                f"pretrained weights refused, nothing was trained on them: {exc}. Stage {name} again "
                f"({stage_command(name, store)}) to replace the damaged object"
            ) from None
        return target, {
            "pretrained": name,
            "pretrained_digest": record["digest"],
            "pretrained_uri": uri,
            "pretrained_paddlenlp_version": staged.manifest.get("paddlenlp_version"),
        }


def _downloaded(name: str, cache: Path) -> tuple[Path, dict[str, Any]]:
    """PaddleNLP's download (model.allow_download), saved and digested as staging would."""
    log.warning("%s is staged nowhere this run reads; downloading it through PaddleNLP (model.allow_download)", name)
    target = cache / "download" / name
    shutil.rmtree(target, ignore_errors=True)
    save_weights(name, None, target)
    digest = manifest.content_digest(manifest.file_entries(target))
    return target, {
        "pretrained": name,
        "pretrained_digest": digest,
        "pretrained_uri": "paddlenlp-download",
        "pretrained_paddlenlp_version": paddlenlp_version(),
    }
