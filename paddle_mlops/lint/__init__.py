"""`paddle-mlops lint`: policy checks on every pod the manifests will create.

`pods` renders the pods (Argo templates with the executor containers of `executor`, workloads,
PaddleJobs, InferenceServices, Argo Events pod templates), `rules` holds the checks, `findings`
collects them over documents and files, `command` is the CLI.
"""

from paddle_mlops.lint.command import format_text, main
from paddle_mlops.lint.documents import LintInputError, resource_manifest, workflow_spec
from paddle_mlops.lint.executor import controller_executor, executor_setting
from paddle_mlops.lint.findings import Finding, lint_documents, lint_paths
from paddle_mlops.lint.pods import ARGO_WORKFLOW_KINDS, EXEMPT_ANNOTATION, Pod, pods_of
from paddle_mlops.lint.rules import RESTRICTED_RULES, check_pod

__all__ = [
    "ARGO_WORKFLOW_KINDS",
    "EXEMPT_ANNOTATION",
    "RESTRICTED_RULES",
    "Finding",
    "LintInputError",
    "Pod",
    "check_pod",
    "controller_executor",
    "executor_setting",
    "format_text",
    "lint_documents",
    "lint_paths",
    "main",
    "pods_of",
    "resource_manifest",
    "workflow_spec",
]
