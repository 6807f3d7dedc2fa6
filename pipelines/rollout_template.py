"""WorkflowTemplate `rollout`: a published model validated, registered with the verdict, and rolled out.

What starts it: the bucket notification of a new `manifest.json` (Argo Events, `rollout-on-publish`; the local
run delivers the same notification itself), or a person (`argo submit --from workflowtemplate/rollout
-p model-uri=…`). validate judges the model (steps/validate.py); register records every judged model, with the
reason when it was refused; rollout runs only for a model that passed. A notification for a model judged before
ends at validate (`duplicate`), so a replayed or redelivered event never moves traffic twice.

With serving.target=local (a `paddle-mlops run`) a model that is not rolled out (a duplicate, or refused) ends at
`serve-champion` instead: the champion stays served, started again if its process was stopped (`serve stop`), so
every run that ends with a champion leaves it served. It moves no alias; a cluster's InferenceService keeps serving.

One rollout at a time: every workflow that changes the InferenceServices holds the same mutex
(`ROLLOUT_MUTEX`, also taken by image-rollout), so a replay waits for the first run and then finds it judged.
"""

from __future__ import annotations

from hera.workflows import DAG, Parameter, WorkflowTemplate
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from pipelines import release_templates, templates, workflow_spec
from pipelines.dag_task import dag_task
from pipelines.platform import publish_events

NAME = "rollout"
SERVE_CHAMPION = "serve-champion"
# What `paddle-mlops run` reports after the local rollout: summary key -> (task, output parameter).
RESULTS = {
    "model_uri": ("validate", "model-uri"),
    "mlflow_run_id": ("validate", "run-id"),
    "verdict": ("validate", "verdict"),
    "validation": ("validate", "reason"),
    "model_version": ("register", "model-version"),
    # a duplicate (a model published before, e.g. by a run whose steps were all reused) was registered before
    "registered_version": ("validate", "registered-version"),
    "serving_url": ("rollout", "serving-url"),
    "rollout": ("rollout", "outcome"),
    # serving.target=local: the champion kept served when nothing was rolled out (its task is local-only)
    "champion_url": (SERVE_CHAMPION, "serving-url"),
}
# The event parameters the `rollout-on-publish` Sensor's trigger sets, named once there.
EVENT_PARAMETERS = tuple(name for name, _ in publish_events.WORKFLOW_PARAMETERS)


# The controller substitutes the workflow's parameters into its spec before it takes the workflow-level lock
# (argo-workflows v4.1.2 workflow/controller/operator.go setExecWorkflow -> substituteGlobalVariables, then
# operate -> syncManager.TryAcquire), so each task's releases queue on their own mutex.
ROLLOUT_MUTEX = "rollout-{{workflow.parameters.task}}"


def mutex(cfg: PipelineConfig) -> m.Synchronization:
    """The lock every workflow holds that changes one task's InferenceServices."""
    return m.Synchronization(mutexes=[m.Mutex(name=ROLLOUT_MUTEX)])


def parameters(cfg: PipelineConfig) -> list[Parameter]:
    return [
        Parameter(name="event-bucket", value="", description="bucket of the manifest notification (set by the sensor)"),
        Parameter(
            name="event-key", value="", description="object key of the manifest notification (set by the sensor)"
        ),
        Parameter(name="event-etag", value="", description="eTag of the announced manifest (set by the sensor)"),
        Parameter(name="model-uri", value="", description="a published model prefix, instead of an event"),
        Parameter(name="region", value=cfg.cluster.region),
        Parameter(
            name="image-digest",
            value="",
            description="serving image digest (sha256:…); empty: the one the manifest names, else the champion's",
        ),
        Parameter(
            name="redeploy",
            value="false",
            enum=["false", "true"],
            description="true: judge and roll out a model that was validated before (a manual re-deploy)",
        ),
        Parameter(name="git-sha", value="unknown", description="recorded until validate reads the manifest's"),
        *workflow_spec.run_parameters(cfg),
    ]


def build(cfg: PipelineConfig) -> WorkflowTemplate:
    """The `rollout` WorkflowTemplate for this configuration (no side effects)."""
    with workflow_spec.workflow_template(cfg, NAME, parameters(cfg)) as wt:
        validate = release_templates.validate(cfg)
        register = release_templates.register(cfg)
        rollout = release_templates.rollout(cfg)
        templates.exit_handler(cfg)
        with DAG(name="main"):
            given = ("git-sha", "model-uri", *EVENT_PARAMETERS, "image-digest", "redeploy")
            t_validate = dag_task(
                validate, name="validate", arguments={p: f"{{{{workflow.parameters.{p}}}}}" for p in given}
            )
            out = t_validate.get_parameter
            verdict = out("verdict")
            judged = {"git-sha": out("git-sha"), "model-uri": out("model-uri")}
            t_register = dag_task(
                register,
                name="register",
                when=f"{verdict} != duplicate",
                arguments={
                    **judged,
                    "manifest-digest": out("manifest-digest"),
                    "mlflow-run-id": out("run-id"),
                    "verdict": verdict,
                    "reason": out("reason"),
                    "metrics": out("metrics"),
                },
            )
            t_rollout = dag_task(
                rollout,
                name="rollout",
                when=f"{verdict} == passed",
                arguments={
                    **judged,
                    "model-version": t_register.get_parameter("model-version"),
                    "region": "{{workflow.parameters.region}}",
                    "image-digest": out("image-digest"),
                },
            )
            t_validate >> t_register
            t_register >> t_rollout
            tasks = [t_validate, t_register, t_rollout]
            if cfg.serving.target == "local":
                tasks.append(
                    dag_task(
                        release_templates.serve_champion(cfg),
                        name=SERVE_CHAMPION,
                        when=f"{verdict} != passed",
                        arguments={"git-sha": out("git-sha")},
                    )
                )
                t_validate >> tasks[-1]
        by_name = {t.name: t for t in tasks}
        for task, output in RESULTS.values():
            if task in by_name:
                by_name[task].get_parameter(output)
    wt.synchronization = mutex(cfg)
    return wt
