"""A step as an Argo container, written once: `python -m steps.<module>` from the tools image with the arguments
every step takes (contracts.md), restricted, retried, bounded and measured.

Values from other tasks arrive as `inputs.parameters`, outputs leave as files under /tmp/outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hera.workflows import Container, Parameter, Resources
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import (
    CACHE_OUTPUT,
    OUTPUTS_DIR,
    OUTPUTS_FLAG,
    RERUN_PARAMETER,
    STEP_CACHE_PARAMETER,
)
from pipelines import k8s
from pipelines.observability import argo_template_metrics
from pipelines.run_scope import WORKFLOW, RunScope

OUTPUTS = OUTPUTS_DIR
# The commit a run records. The submitted `git-sha` may be empty (the scheduled retrain has no push:
# build-image resolves the branch head), so every template after build-image takes the commit that
# build-image actually built as its `git-sha` input; only build-image and the exit handler read the
# submitted parameter.
SUBMITTED_GIT_SHA = "{{workflow.parameters.git-sha}}"
COMMIT = "{{inputs.parameters.git-sha}}"


def common_args(git_sha: str, scope: RunScope = WORKFLOW) -> list[str]:
    """The arguments every step takes (contracts.md): the configuration, the task and the commit."""
    return [
        "--config", "{{workflow.parameters.config}}",
        "--env", "{{workflow.parameters.env}}",
        "--task", scope.task,
        "--overrides", scope.overrides,
        "--git-sha", git_sha,
    ]  # fmt: skip


# The step cache (docs/caching.md): where cacheable steps reuse and record outputs, and which steps compute anyway.
CACHE_ARGS = [
    "--step-cache",
    f"{{{{workflow.parameters.{STEP_CACHE_PARAMETER}}}}}",
    "--rerun",
    f"{{{{workflow.parameters.{RERUN_PARAMETER}}}}}",
]


def output(name: str) -> Parameter:
    return Parameter(name=name, value_from=m.ValueFrom(path=f"{OUTPUTS}/{name}"))


def step_container(
    cfg: PipelineConfig,
    name: str,
    module: str,
    args: Sequence[str] = (),
    inputs: Sequence[str] = (),
    outputs: Sequence[str] = (),
    resources: Resources = k8s.TOOLS_RESOURCES,
    commit_input: bool = True,
    scope: RunScope = WORKFLOW,
    cacheable: bool = False,
    **extra: Any,
) -> Container:
    """A restricted container running one step module from the tools image; with `commit_input` it
    takes the built commit as its `git-sha` input, else it reads the submitted parameter. `scope` says
    where it reads the task, its overrides and the workspace (run_scope.py). A `cacheable` step
    (steps/runtime/caching/reuse.py) gets the step cache and what to rerun, and reports its use of the cache."""
    git_sha = COMMIT if commit_input else SUBMITTED_GIT_SHA
    inputs = [*(["git-sha"] if commit_input else []), *scope.inputs, *inputs]
    if cacheable:
        args, outputs = [*args, *CACHE_ARGS], [*outputs, CACHE_OUTPUT]
    return Container(
        name=name,
        image=extra.pop("image", cfg.images.tools),
        image_pull_policy="IfNotPresent",
        command=["python", "-m", f"steps.{module}"],
        args=[*common_args(git_sha, scope), *args, *([OUTPUTS_FLAG, OUTPUTS] if outputs else [])],
        working_dir=k8s.PROJECT_DIR,
        env=k8s.runtime_env(cfg, git_sha) + extra.pop("env", []),
        inputs=[Parameter(name=i) for i in inputs] or None,
        outputs=[output(o) for o in outputs] or None,
        resources=resources,
        security_context=k8s.container_security_context(),
        volumes=[k8s.tmp_volume(), *extra.pop("volumes", [])],
        retry_strategy=extra.pop("retry_strategy", None) or k8s.retry_strategy(cfg),
        active_deadline_seconds=extra.pop("active_deadline_seconds", cfg.cluster.step_deadline_seconds),
        metrics=m.Metrics.model_validate(argo_template_metrics(name)),
        **extra,
    )
