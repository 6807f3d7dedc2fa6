"""Names and numbers both sides share (pipelines/ writes them into manifests, steps/ acts on them).

Only the ones this module holds are single-sourced so far; issue #19 moves the rest here.
"""

from __future__ import annotations

# Step exit codes. Argo's retry expression (pipelines/k8s.py) retries only what a retry can change.
EXIT_OK = 0
# A failure that may pass on a retry (network, API server, a crashed process): Argo retries it.
EXIT_FAILED = 1
EXIT_USER_ERROR = 2
# The rollout checked the new model and rolled it back: a final verdict, so Argo must not retry it,
# yet the step still fails.
EXIT_ROLLED_BACK = 3
# Exit codes a retry cannot change.
FINAL_EXIT_CODES = (EXIT_USER_ERROR, EXIT_ROLLED_BACK)

# The model server's HTTP port in the predictor container (KServe's default container port).
SERVING_PORT = 8080
