"""The one supported-version matrix (paddle_mlops_core/versions.py): well-formed, consistent, and the table
README shows is the same one the code holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddle_mlops_core import versions

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v1.9.11", (1, 9, 11)), ("1.30", (1, 30)), ("v1.34.2-eks-1", (1, 34, 2)), ("v0.20.0-rc1", (0, 20, 0))],
)
def test_parse_reads_release_numbers_and_drops_suffixes(text: str, expected: tuple[int, ...]) -> None:
    assert versions.parse(text) == expected


def test_parse_refuses_what_is_not_a_version() -> None:
    with pytest.raises(ValueError, match="not a version"):
        versions.parse("latest")


@pytest.mark.parametrize(
    ("have", "need", "ok"),
    [("3.6.0", "3.6", True), ("3.5.9", "3.6.0", False), ("4.1.2", "3.6.0", True), ("1.29", "1.30", False)],
)
def test_at_least_compares_numerically(have: str, need: str, ok: bool) -> None:
    assert versions.at_least(have, need) is ok


def test_every_component_is_tested_at_or_above_its_minimum() -> None:
    for component in versions.MATRIX.values():
        assert versions.at_least(component.tested, component.minimum), component


def test_every_version_dependent_field_exists_at_the_matrix_minimum() -> None:
    """A generated field that needs a newer release than the matrix minimum would fail on a supported cluster."""
    for feature in versions.FEATURES:
        assert feature.component in versions.MATRIX, feature
        assert versions.supports(feature.component, feature.what), (
            f"{feature.what} needs {feature.component} {feature.since}, "
            f"the matrix minimum is {versions.MATRIX[feature.component].minimum}"
        )


def test_readme_shows_the_matrix_the_code_holds() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert versions.markdown_table() in readme


def test_the_buildkit_daemon_and_client_images_are_supported_releases() -> None:
    """The daemon image (images.buildkit) and the buildctl the tools image copies from must be one
    release the matrix supports, so client and daemon speak the same protocol."""
    from paddle_mlops.compile import default_compile_config

    daemon_tag = default_compile_config().images.buildkit.rsplit(":", 1)[1]
    dockerfile = (ROOT / "images" / "tools" / "Dockerfile").read_text(encoding="utf-8")
    client_tag = next(
        line.split()[1].rsplit(":", 1)[1] for line in dockerfile.splitlines() if line.startswith("FROM moby/buildkit:")
    )
    assert daemon_tag == client_tag
    assert versions.at_least(daemon_tag, versions.MATRIX["buildkit"].minimum), daemon_tag


def test_the_trainer_minimum_installs_at_least_the_jobset_minimum() -> None:
    """Trainer's install brings its own JobSet (kubeflow/trainer v2.2.0 and v2.3.0
    manifests/third-party/jobset/kustomization.yaml: JobSet v0.11.0 and v0.12.0; go.mod sigs.k8s.io/jobset
    v0.11.1 and v0.12.0), so a cluster on the Trainer minimum runs that JobSet: it must be a supported one."""
    trainer, jobset = versions.MATRIX["kubeflow-trainer"], versions.MATRIX["jobset"]
    assert versions.at_least(versions.TRAINER_INSTALLS_JOBSET[trainer.minimum], jobset.minimum)
    assert versions.at_least(versions.TRAINER_INSTALLS_JOBSET[trainer.tested], jobset.tested)
    # Trainer 2.2 would bring JobSet 0.11, under the JobSet minimum: it is not a supported Trainer.
    assert not versions.at_least(versions.TRAINER_INSTALLS_JOBSET["2.2.0"], jobset.minimum)
    assert not versions.at_least("2.2.1", trainer.minimum)
