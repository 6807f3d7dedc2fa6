"""The ServiceAccounts the project's pods run as, named once: the job and step builders set them on the pods,
and the RBAC install set (platform/rbac.py) creates them with only what each role calls."""

from __future__ import annotations

# Training pods: no Kubernetes API access; their token is not even mounted.
TRAIN_SERVICE_ACCOUNT = "paddle-mlops-train"
# The rollout step: KServe InferenceServices, nothing else.
ROLLOUT_SERVICE_ACCOUNT = "paddle-mlops-rollout"
