"""Workload shapes on the command line (``beamer workload generate --mix/--models/...``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control.cli import main
from workloads import json_format
from workloads.hp_tuning import DEFAULT_JOBS, HpTuningConfig, JobShape, generate
from workloads.shapes import Shape


def _generate(tmp_path: Path, *flags: str) -> tuple[object, list[dict[str, object]]]:
    out = tmp_path / "w.json"
    assert main(["workload", "generate", "--seed", "3", *flags, "--out", str(out)]) == 0
    workload = json_format.read(out)
    return workload, json.loads(workload.meta["jobs"])


def test_defaults_are_unchanged(tmp_path: Path) -> None:
    assert Shape().apply(HpTuningConfig()) == HpTuningConfig()
    workload, _ = _generate(tmp_path)
    assert workload == generate(HpTuningConfig(seed=3))


def test_mix_picks_the_job_kinds(tmp_path: Path) -> None:
    _, sha_jobs = _generate(tmp_path, "--mix", "sha")
    assert {job["kind"] for job in sha_jobs} == {"sha"}
    _, hb_jobs = _generate(tmp_path, "--mix", "hyperband")
    assert {job["kind"] for job in hb_jobs} == {"hyperband"}
    assert Shape(mix="sha").jobs() == tuple(job for job in DEFAULT_JOBS if job.kind == "sha")


def test_eta_and_max_trials_set_every_job_shape(tmp_path: Path) -> None:
    workload, jobs = _generate(
        tmp_path, "--mix", "sha", "--eta", "2", "--max-trials", "16", "--sync", "ring"
    )
    assert {(job["max_budget"], job["eta"], job["pattern"]) for job in jobs} == {(16, 2, "ring")}
    # SHA with R = 16, eta = 2: stages of 16, 8, 4, 2, 1 trials.
    for experiment in workload.experiments:  # type: ignore[attr-defined]
        assert [len(stage.trials) for stage in experiment.stages] == [16, 8, 4, 2, 1]
    # Shapes made identical by the overrides are drawn once: one SHA and one Hyperband shape.
    assert Shape(eta=3, max_trials=9).jobs() == (
        JobShape("sha", 9, 3),
        JobShape("hyperband", 9, 3),
    )


def test_models_and_sync(tmp_path: Path) -> None:
    _, jobs = _generate(tmp_path, "--models", "resnet50,vgg16", "--sync", "ps")
    assert {job["model"] for job in jobs} <= {"resnet50", "vgg16"}
    assert {job["pattern"] for job in jobs} == {"ps"}
    _, one = _generate(tmp_path, "--models", "alexnet")
    assert {job["model"] for job in one} == {"alexnet"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--eta", "1"], "--eta: the reduction factor must be >= 2, not 1"),
        (["--max-trials", "0"], "--max-trials: must be >= 1, not 0"),
        (["--models", "resnet50,nope"], "--models: unknown model 'nope'"),
        (["--sync", "mesh"], "--sync: 'mesh' is not one of ring, ps, both"),
        (
            ["--models", "resnet50,,vgg16"],
            "--models: 'resnet50,,vgg16' has an empty item (two commas, or one at an end)",
        ),
        (["--sync", "ring,"], "--sync: 'ring,' has an empty item (two commas, or one at an end)"),
        (["--models", " , "], "--models: no model given"),
        (["--kind", "fb2010", "--mix", "sha"], "--mix applies to --kind hp-tuning only"),
    ],
)
def test_bad_shape_flags_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "w.json"
    assert main(["workload", "generate", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"beamer: error: {message}")
    assert err.count("\n") == 1
    assert not out.exists()
