"""Labels the project sets on one object and selects by on another.

Each is written where an object is made (a training job, its pods, a team namespace) and read where something
selects it (the train step's exit hook, a NetworkPolicy, a Kueue ClusterQueue), so both sides take it from here.
"""

from __future__ import annotations

# Every training job carries its workflow's name and its task: the train step's exit hook deletes the workflow's
# jobs by them (a finetune-batch branch only its own task's), and release-prepull its DaemonSet.
WORKFLOW_LABEL = "paddle-mlops/workflow"
TASK_LABEL = "paddle-mlops/task"
# What a pod is part of: the training NetworkPolicy selects the training pods by it; each pre-pull DaemonSet
# selects its own pods by it.
COMPONENT_LABEL = "paddle-mlops/component"
TRAIN_POD_LABELS = {COMPONENT_LABEL: "train"}
# A team's namespaces, queues and priority class; the team's Kueue ClusterQueue admits jobs from the namespaces
# that carry it.
TEAM_LABEL = "paddle-mlops/team"
