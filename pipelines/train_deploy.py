"""WorkflowTemplate `train-deploy`: from a commit to a published model, one DAG.

build-image → prepare-data → train-cache → train (unless the step cache held it) → evaluate → upload (when the
gate passed), with an exit handler that closes the MLflow run. Publishing is the hand-over: the new
`manifest.json` is the bucket notification that starts the `rollout` workflow (validate → register → rollout,
pipelines/rollout_template.py), the same path a model published from anywhere else takes, so a model is
registered and rolled out once, by one path. With serving.target=local a run whose gate failed publishes nothing, so
no rollout workflow follows: it ends at `serve-champion`, which keeps the champion served (started again after a
`serve stop`), as the rollout workflow does for a model it does not roll out. The local executor reads this same
DAG (`build(cfg).to_dict()`, ordered by `paddle_mlops.local.dag.load_workflow`) and delivers the notification to the
rollout itself.
"""

from __future__ import annotations

from hera.workflows import DAG, Parameter, WorkflowTemplate
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from pipelines import release_templates, resource_templates, templates, train_step, training_canary, workflow_spec
from pipelines.dag_task import dag_task
from pipelines.rollout_template import SERVE_CHAMPION

NAME = "train-deploy"
# What `paddle-mlops run` reports after a local run: summary key -> (task, output parameter) of this DAG.
# build() resolves each through Hera, so renaming a task or an output fails at build time, not in a summary.
RESULTS = {
    "metrics": ("evaluate", "metrics"),
    "gate": ("evaluate", "gate-passed"),
    "mlflow_run_id": ("evaluate", "mlflow-run-id"),
    "model_uri": ("upload", "model-uri"),
}


def parameters(cfg: PipelineConfig) -> list[Parameter]:
    """What a submitter (Argo Events sensor, `argo submit`, the CronWorkflow) may set."""
    return [
        Parameter(
            name="git-sha",
            description="commit to build and train; empty builds the head of git-branch (recorded as that commit)",
        ),
        Parameter(name="git-repo", description="repository URL the build step clones"),
        Parameter(name="git-branch", value="main"),
        Parameter(name="pusher", value="", description="who pushed (set by the Argo Events sensor; recorded only)"),
        *workflow_spec.run_parameters(cfg),
        Parameter(name="region", value=cfg.cluster.region),
        *workflow_spec.priority_parameters(cfg),
        *workflow_spec.run_id_parameters(),
    ]


def build(cfg: PipelineConfig) -> WorkflowTemplate:
    """The `train-deploy` WorkflowTemplate for this configuration (no side effects)."""
    with workflow_spec.workflow_template(cfg, NAME, parameters(cfg)) as wt:
        build_image = templates.build_image(cfg)
        prepare_data = templates.prepare_data(cfg)
        train_cache = templates.train_cache(cfg)
        train = train_step.train(cfg)
        warm = cfg.training.backend == "trainjob"
        if warm:
            prepull_image = resource_templates.prepull_image(cfg)
            canary_tasks = training_canary.tasks(cfg)
        evaluate = templates.evaluate(cfg)
        upload = templates.upload(cfg)
        templates.exit_handler(cfg, trains=True)

        # Not fail-fast: a failed step stops only what depends on it; the other branches (the training-image check,
        # the pre-pull) finish as they would.
        with DAG(name="main", fail_fast=False if warm else None):
            t_build = dag_task(build_image, name="build-image")
            # Every later task records the commit build-image built, never the submitted value.
            commit = {"git-sha": t_build.get_parameter("git-sha")}
            steps = (prepare_data, train_cache, train, evaluate, upload)
            built = (t_build.get_parameter("image-digest"), t_build.get_parameter("serve-image-digest"))
            t_data, t_cache, t_train, t_eval, t_upload = templates.chain(steps, commit, *built)
            tasks = [t_build, t_data, t_cache, t_train, t_eval, t_upload]
            t_build >> t_data
            if cfg.serving.target == "local":
                t_champion = dag_task(
                    release_templates.serve_champion(cfg),
                    name=SERVE_CHAMPION,
                    when=f"{t_eval.get_parameter('gate-passed')} == false",
                    arguments=commit,
                )
                t_eval >> t_champion
                tasks.append(t_champion)
            if warm:
                digest = {"image-digest": t_build.get_parameter("image-digest")}
                # A training image no canary has passed on trains in the first region first (training_canary.py);
                # every other region pulls it, and the run trains, once the canary passed or was not needed.
                t_allowed = canary_tasks(t_build, t_data, {**commit, **digest})
                t_allowed >> t_train
                t_warm = dag_task(
                    prepull_image, name="prepull-image", arguments=digest, continue_on=m.ContinueOn(failed=True)
                )
                t_allowed >> t_warm
        by_name = {task.name: task for task in tasks}
        for task, output in RESULTS.values():
            by_name[task].get_parameter(output)
        if SERVE_CHAMPION in by_name:  # the summary's champion_url (rollout_template.RESULTS) when the gate failed
            by_name[SERVE_CHAMPION].get_parameter("serving-url")
    return wt
