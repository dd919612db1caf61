"""A failed trial is reported in one line: the exception that ended it, not the whole
traceback with colour codes that Ray's task error carries as its text."""

from __future__ import annotations

import pytest

from tuner.run import trial_error_line

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "trainable.py", line 99, in step\n'
    "    raise TrainableError('assignment of experiment 1: 3 hosts')\n"
    "tuner.trainable.TrainableError: assignment of experiment 1: 3 hosts"
)


def test_a_ray_task_error_is_reported_as_the_exception_that_ended_the_trial() -> None:
    exceptions = pytest.importorskip("ray.exceptions")
    error = exceptions.RayTaskError(
        "ImplicitFunc.train", TRACEBACK, ValueError("assignment of experiment 1: 3 hosts"),
        proctitle="ray::ImplicitFunc.train", pid=123, ip="127.0.0.1",
    )  # fmt: skip
    assert "\n" in str(error) and "\x1b[" in str(error)
    assert trial_error_line(error) == "ValueError: assignment of experiment 1: 3 hosts"
    # What Ray Tune keeps: the error as an instance of its cause's class, same text.
    assert trial_error_line(error.as_instanceof_cause()) == trial_error_line(error)


def test_a_traceback_without_a_cause_gives_its_last_exception_line() -> None:
    class TuneError(Exception):
        pass

    line = trial_error_line(TuneError("\x1b[36mray::ImplicitFunc.train()\x1b[39m\n" + TRACEBACK))
    assert line == "tuner.trainable.TrainableError: assignment of experiment 1: 3 hosts"


def test_a_one_line_error_keeps_its_type_and_message() -> None:
    assert (
        trial_error_line(RuntimeError("the switch stopped")) == "RuntimeError: the switch stopped"
    )
    assert trial_error_line(RuntimeError()) == "RuntimeError"
