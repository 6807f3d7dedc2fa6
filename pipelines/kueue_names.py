"""What Kueue and the project agree on by name: the API version, the objects a TrainJob is queued through
(LocalQueue, Cohort, Topology, the MultiKueue check) and the labels Kueue reads on a job.

The TrainJob builder (trainjob.py) names the queue and the priority on each job; the install set
(platform/kueue.py, platform/multikueue.py) creates what those names refer to.
"""

from __future__ import annotations

API = "kueue.x-k8s.io/v1beta2"
COHORT = "paddle-mlops"
# The LocalQueue every team namespace holds; each TrainJob names it.
LOCAL_QUEUE = "training"
TOPOLOGY = "paddle-mlops-network"
MULTIKUEUE_CHECK = "multikueue"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
GPU = "nvidia.com/gpu"
COVERED_RESOURCES = ("cpu", "memory", GPU)
# Labels Kueue reads on a job (kueue pkg/controller/constants/constants.go QueueLabel, WorkloadPriorityClassLabel).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
