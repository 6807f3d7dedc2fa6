"""`paddle-mlops preflight`: is this cluster ready for the install set? One line per check, a fix per finding.

Everything it looks for is derived from what `paddle-mlops compile` renders (plus the objects the
steps create at run time: the train step's PaddleJob, the rollout's InferenceService), so a new
kind, namespace or Secret reference is checked without editing this package. Versions are judged
against `paddle_mlops_core/versions.py`. `cluster` reads the cluster, `controllers` finds controllers
among its Deployments, `versions`, `objects`, `security` and `controller_settings` hold the checks,
`report` runs them and prints the result.
"""

from paddle_mlops.preflight.cluster import METADATA_ONLY, KubernetesApi
from paddle_mlops.preflight.report import CHECKS, preflight, render, run_checks
from paddle_mlops.preflight.results import FINDING, OK, WARNING, PreflightUsageError, Result, install_fix

__all__ = [
    "CHECKS",
    "FINDING",
    "METADATA_ONLY",
    "OK",
    "WARNING",
    "KubernetesApi",
    "PreflightUsageError",
    "Result",
    "install_fix",
    "preflight",
    "render",
    "run_checks",
]
