"""The cluster as preflight reads it: the read-only calls it makes over the official client's API
classes (injectable: tests pass stand-ins), and the connection from a kubeconfig or in-cluster account.
Secrets are read as PartialObjectMetadata, so the API server never sends their data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from paddle_mlops.preflight.results import PreflightUsageError

# What the API server answers with metadata only (kubectl uses it for `get -o name`): no `data`.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TIMEOUT_S = 15


class KubernetesApi:
    """The read-only calls preflight makes, over the official client's API classes."""

    def __init__(self, version: Any, core: Any, apps: Any, extensions: Any, custom: Any, where: str = "") -> None:
        self.version, self.core, self.apps, self.extensions, self.custom = version, core, apps, extensions, custom
        self.where = where
        self._deployments: list[Any] | None = None

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubernetesApi:
        """From a kubeconfig (KUBECONFIG / ~/.kube/config by default), else the in-cluster account."""
        from kubernetes import client

        api_client = _api_client(kubeconfig, context)
        where = f"context {context or _current_context(kubeconfig)} at {api_client.configuration.host}"
        return cls(
            client.VersionApi(api_client),
            client.CoreV1Api(api_client),
            client.AppsV1Api(api_client),
            client.ApiextensionsV1Api(api_client),
            client.CustomObjectsApi(api_client),
            where,
        )

    def server_version(self) -> str:
        return str(self.version.get_code(_request_timeout=TIMEOUT_S).git_version)

    def custom_resource_definitions(self) -> list[Any]:
        return list(self.extensions.list_custom_resource_definition(_request_timeout=TIMEOUT_S).items)

    def namespace(self, name: str) -> Any:
        return self.core.read_namespace(name, _request_timeout=TIMEOUT_S)

    def config_map_data(self, name: str, namespace: str) -> dict[str, str] | None:
        """A ConfigMap's data ({} when it has none); None when the ConfigMap does not exist."""
        try:
            return dict(self.core.read_namespaced_config_map(name, namespace, _request_timeout=TIMEOUT_S).data or {})
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def secret_exists(self, name: str, namespace: str) -> bool:
        """Asks for PartialObjectMetadata, so the response carries no `data`; nothing is decoded but the name."""
        try:
            response = self.core.read_namespaced_secret(
                name, namespace, _headers={"Accept": METADATA_ONLY}, _preload_content=False, _request_timeout=TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return bool(((json.loads(response.data) or {}).get("metadata") or {}).get("name") == name)

    def deployments(self) -> list[Any]:
        """Every Deployment of the cluster, listed once per preflight run (three checks read them)."""
        if self._deployments is None:
            self._deployments = list(self.apps.list_deployment_for_all_namespaces(_request_timeout=TIMEOUT_S).items)
        return self._deployments

    def event_bus(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(
                    "argoproj.io", "v1alpha1", namespace, "eventbus", name, _request_timeout=TIMEOUT_S
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _api_client(kubeconfig: str | None, context: str | None) -> Any:
    """An ApiClient from the kubeconfig, or from the in-cluster account when no file or context was named."""
    from kubernetes import client, config

    if kubeconfig is not None:
        path = Path(kubeconfig)
        if not path.is_file():
            raise PreflightUsageError(f"kubeconfig {path} does not exist or is not a file. Pass --kubeconfig PATH.")
    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except config.ConfigException as exc:
        if kubeconfig is not None or context is not None:
            raise PreflightUsageError(_kubeconfig_problem(kubeconfig, context, exc)) from None
        try:
            config.load_incluster_config()
        except config.ConfigException:
            raise PreflightUsageError(
                f"no Kubernetes credentials ({exc}). Set KUBECONFIG, pass --kubeconfig PATH, or run inside the cluster."
            ) from None
        return client.ApiClient()
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise PreflightUsageError(f"cannot read kubeconfig {kubeconfig or '~/.kube/config'}: {exc}") from None


def _current_context(kubeconfig: str | None) -> str:
    from kubernetes import config

    try:
        return str(config.list_kube_config_contexts(config_file=kubeconfig)[1]["name"])
    except Exception:  # noqa: BLE001 - in-cluster credentials have no kubeconfig context
        return "(in-cluster)"


def _kubeconfig_problem(kubeconfig: str | None, context: str | None, exc: Exception) -> str:
    from kubernetes import config

    where = kubeconfig or "the default kubeconfig (KUBECONFIG or ~/.kube/config)"
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # noqa: BLE001 - the file itself is unusable; say so below
        contexts = None
    if context and contexts is not None and context not in {c["name"] for c in contexts}:
        names = ", ".join(sorted(c["name"] for c in contexts)) or "none"
        return f"context {context!r} is not in {where} (it has: {names}). Pass --context with one of them."
    return f"cannot use {where}: {exc}. Fix the file or pass --kubeconfig PATH."
