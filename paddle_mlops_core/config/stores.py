"""Where a run keeps what it makes: the object store (`storage:`) and MLflow (`mlflow:`).

The object store holds published models, the workspace steps exchange data in and the step cache; MLflow tracks
the runs and registers the models. Both default to something on this machine (a directory, SQLite) for local runs.
"""

from __future__ import annotations

from pydantic import Field

from paddle_mlops_core.config.strict import Strict
from paddle_mlops_core.contracts import STEP_CACHE_DIR


class StorageConfig(Strict):
    """Object store for published models; a local directory unless an S3 URI is given."""

    uri: str = Field("local", description="'local' (<workdir>/store), a directory, or s3://bucket/prefix")
    endpoint_url: str | None = Field(
        None, description="S3 endpoint (MinIO in production); env S3_ENDPOINT_URL overrides"
    )
    region: str = "us-east-1"
    credentials_secret: str = Field(
        "minio-credentials", description="Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    )
    region_stores: bool = Field(
        True,
        description="each region reads its own store (configs/regions `store`, `store_endpoint_url`, "
        "`store_credentials_secret`); false: every region reads this one (a laptop, where nothing leaves the machine)",
    )
    workspace: str = Field(
        "s3://paddle-mlops/runs", description="where steps exchange data and models on the cluster (per workflow)"
    )
    step_cache: str | None = Field(
        None,
        description="where step outputs are kept by content key and reused (docs/caching.md): an s3:// prefix or a "
        "directory; null: `step-cache` beside the workspace (s3://paddle-mlops/step-cache); '' turns reuse off",
    )

    def step_cache_uri(self) -> str:
        """The step cache root: `step_cache`, else the folder `step-cache` beside the workspace root."""
        if self.step_cache is not None:
            return self.step_cache
        root = self.workspace.rstrip("/")
        parent = root.rpartition("/")[0]
        # a workspace at a bucket's root (s3://bucket) has no parent in the bucket: the cache goes inside it
        return f"{root if parent in ('s3:', 's3:/') else parent}/{STEP_CACHE_DIR}"


class MLflowConfig(Strict):
    tracking_uri: str | None = Field(
        None, description="None: sqlite:///<workdir>/mlflow.db; env MLFLOW_TRACKING_URI overrides"
    )
    experiment: str | None = Field(None, description="null: ernie-<task>")
    registered_model: str | None = Field(None, description="null: ernie-<task>")
