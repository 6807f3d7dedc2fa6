"""Labels the project sets on one object and selects by on another.

Each is written where an object is made (a training job, its pods, a team namespace) and read where something
selects it (the exit handler, a NetworkPolicy, a Kueue ClusterQueue), so both sides take it from here.
"""

from __future__ import annotations

# Every training job carries its workflow's name, its task and its training run (the runtime selects by them too, so
# they live in the contracts): the exit handler releases the workflow's jobs by them, a train step finds another
# live trainer of its run by the last, and release-prepull deletes the run's DaemonSet by the workflow's.
from paddle_mlops_core.contracts import TASK_LABEL, TRAIN_RUN_LABEL, WORKFLOW_LABEL

# What a pod is part of: the training NetworkPolicy selects the training pods by it; each pre-pull DaemonSet
# selects its own pods by it.
COMPONENT_LABEL = "paddle-mlops/component"
TRAIN_POD_LABELS = {COMPONENT_LABEL: "train"}
# A team's namespaces, queues and priority class; the team's Kueue ClusterQueue admits jobs from the namespaces
# that carry it.
TEAM_LABEL = "paddle-mlops/team"

__all__ = ["COMPONENT_LABEL", "TASK_LABEL", "TEAM_LABEL", "TRAIN_POD_LABELS", "TRAIN_RUN_LABEL", "WORKFLOW_LABEL"]
