"""`paddle-mlops preflight` through the official client: it asks the API server for Secret metadata
only, and a bad kubeconfig, context or configuration exits 2 with a message instead of a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops import cli, preflight
from paddle_mlops_core.contracts import EXIT_USAGE
from tests.kubernetes_standin import SECRET_VALUE


def test_the_real_client_asks_for_metadata_only(tmp_path) -> None:
    """Through the official client and a kubeconfig, against a local HTTP stand-in of the API server
    that, like kube-apiserver, answers `as=PartialObjectMetadata` without `data`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
            seen.append((self.path, self.headers.get("Accept", "")))
            if self.path.startswith("/version"):
                body: dict[str, Any] = {
                    "major": "1",
                    "minor": "34",
                    "gitVersion": "v1.34.1",
                    "gitCommit": "0" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2025-09-09T00:00:00Z",
                    "goVersion": "go1.24.6",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            elif self.path == "/api/v1/namespaces/ml-pipelines/secrets/minio-credentials":
                meta = {"name": "minio-credentials", "namespace": "ml-pipelines"}
                partial = "as=PartialObjectMetadata" in self.headers.get("Accept", "")
                body = (
                    {"kind": "PartialObjectMetadata", "metadata": meta}
                    if partial
                    else {"kind": "Secret", "metadata": meta, "data": {"v": SECRET_VALUE}}
                )
            else:
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"kind":"Status","code":404,"reason":"NotFound"}')
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
        api = preflight.KubernetesApi.connect(str(path), "lab")
        assert api.server_version() == "v1.34.1"
        assert api.secret_exists("minio-credentials", "ml-pipelines") is True
        assert api.secret_exists("absent", "ml-pipelines") is False
    finally:
        server.shutdown()
    secret_reads = [accept for path, accept in seen if "/secrets/" in path]
    assert secret_reads == [preflight.METADATA_ONLY] * 2


# --- bad usage ----------------------------------------------------------------------------------------


def _kubeconfig(tmp_path: Path, server: str = "https://127.0.0.1:1") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}],
                "current-context": "lab",
            }
        )
    )
    return path


def test_unknown_context_exits_2_and_lists_the_known_ones(tmp_path, capsys) -> None:
    code = cli.main(["preflight", "--kubeconfig", str(_kubeconfig(tmp_path)), "--context", "prod"])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE
    assert "context 'prod' is not in" in err and "(it has: lab)" in err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("kind", ["missing", "directory", "not-yaml", "not-a-kubeconfig"])
def test_unreadable_kubeconfig_exits_2(tmp_path, capsys, kind) -> None:
    path = tmp_path / "kubeconfig"
    if kind == "directory":
        path.mkdir()
    elif kind == "not-yaml":
        path.write_text("clusters: [\n")
    elif kind == "not-a-kubeconfig":
        path.write_text("just: a mapping\n")
    code = cli.main(["preflight", "--kubeconfig", str(path)])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE
    assert err.startswith("preflight: ") and str(path) in err
    assert "Traceback" not in out + err


def test_bad_configuration_exits_2(capsys) -> None:
    assert cli.main(["preflight", "--set", "cluster.namespacez=x"]) == EXIT_USAGE
    assert "configuration error" in capsys.readouterr().err


def test_help(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["preflight", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--context", "--kubeconfig", "--json", "--config", "--env", "--set"):
        assert flag in out
