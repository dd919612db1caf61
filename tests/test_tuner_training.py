"""The tuner's training: a numpy MLP on scikit-learn's digits, data-parallel over W workers."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.training import (
    DataParallelTraining,
    Mlp,
    TrainingConfig,
    digits,
    gradient_bytes,
    local_sum,
    parameter_count,
)

SMALL = TrainingConfig(hidden_width=64, batch_size=64, learning_rate=0.1, seed=3)


def _train(config: TrainingConfig, workers: int, iterations: int) -> DataParallelTraining:
    training = DataParallelTraining(config, workers)
    for _ in range(iterations):
        training.step(local_sum)
    return training


def test_validation_accuracy_rises_far_above_chance() -> None:
    training = DataParallelTraining(SMALL, workers=2)
    before = training.evaluate()
    for _ in range(40):
        training.step(local_sum)
    after = training.evaluate()
    assert before["validation_accuracy"] < 0.3  # ten classes: chance is 0.1
    assert after["validation_accuracy"] > 0.85
    assert after["validation_loss"] < before["validation_loss"] / 3


def test_same_config_and_seed_give_the_same_bits_another_seed_does_not() -> None:
    first = _train(SMALL, 3, 5)
    again = _train(SMALL, 3, 5)
    other = _train(TrainingConfig(hidden_width=64, batch_size=64, learning_rate=0.1, seed=4), 3, 5)
    assert first.parameters.tobytes() == again.parameters.tobytes()
    assert first.evaluate() == again.evaluate()
    assert first.parameters.tobytes() != other.parameters.tobytes()


def test_worker_gradients_sum_to_the_whole_batch_gradient() -> None:
    """Sharding only splits the work: W workers' summed gradients equal one worker's."""
    one = DataParallelTraining(SMALL, 1).compute()[0]
    four = DataParallelTraining(SMALL, 4).compute()
    assert not np.allclose(four[0], one)  # each shard alone is not the whole batch
    np.testing.assert_allclose(local_sum(four)[0], one, rtol=1e-4, atol=1e-6)


def test_backpropagation_matches_finite_differences() -> None:
    model = Mlp((5, 7, 4))
    params = model.initial(1).astype(np.float64)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5))
    y = rng.integers(0, 4, size=6)
    grad = np.empty_like(params)
    model.gradient(params, x, y, 1.0, grad)  # type: ignore[arg-type]
    epsilon = 1e-6
    for index in rng.choice(model.count, size=20, replace=False):
        bumped = params.copy()
        bumped[index] += epsilon
        up = model.gradient(bumped, x, y, 1.0, np.empty_like(params))  # type: ignore[arg-type]
        bumped[index] -= 2 * epsilon
        down = model.gradient(bumped, x, y, 1.0, np.empty_like(params))  # type: ignore[arg-type]
        assert grad[index] == pytest.approx((up - down) / (2 * epsilon), rel=1e-4, abs=1e-7)


def test_default_gradient_is_a_megabyte_or_so() -> None:
    config = TrainingConfig()
    assert parameter_count(config) == 64 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert 1_000_000 <= gradient_bytes(config) <= 2_000_000
    assert gradient_bytes(TrainingConfig(hidden_width=256)) < gradient_bytes(config) / 3


def test_restoring_a_checkpoint_continues_bit_for_bit() -> None:
    straight = _train(SMALL, 2, 6)
    paused = _train(SMALL, 2, 3)
    resumed = DataParallelTraining(SMALL, 2)
    resumed.load_state({k: v.copy() for k, v in paused.state().items()})
    assert resumed.iteration == 3
    for _ in range(3):
        resumed.step(local_sum)
    assert resumed.parameters.tobytes() == straight.parameters.tobytes()
    assert all(r.tobytes() == straight.parameters.tobytes() for r in resumed.replicas)


def test_a_checkpoint_of_another_model_is_refused() -> None:
    state = _train(SMALL, 1, 1).state()
    other = DataParallelTraining(TrainingConfig(hidden_width=32), 1)
    with pytest.raises(ValueError, match="checkpoint parameters"):
        other.load_state(state)


def test_workers_that_received_different_sums_are_refused() -> None:
    training = DataParallelTraining(SMALL, 2)
    summed = local_sum(training.compute())
    summed[1][7] += np.float32(1e-3)
    with pytest.raises(RuntimeError, match="worker 1 received a different sum"):
        training.apply(summed)


def test_config_from_a_tuner_mapping_and_bad_values() -> None:
    config = TrainingConfig.from_mapping(
        {"learning_rate": 0.01, "batch_size": 64.0, "seed": 7, "unrelated": "x"}
    )
    assert (config.learning_rate, config.batch_size, config.seed) == (0.01, 64, 7)
    assert isinstance(config.batch_size, int)
    with pytest.raises(ValueError, match=r"learning_rate must be > 0.*momentum must be in"):
        TrainingConfig(learning_rate=0, momentum=1.0)
    with pytest.raises(ValueError, match="leaves some of the 4 workers no sample"):
        DataParallelTraining(TrainingConfig(batch_size=3), 4)


def test_the_split_is_fixed_and_disjoint() -> None:
    data = digits()
    assert len(data.train_y) + len(data.validation_y) == 1797
    assert len(data.validation_y) == 359
    assert data.train_x.dtype == np.float32
    assert float(data.train_x.min()) >= 0.0 and float(data.train_x.max()) <= 1.0
    rows = {row.tobytes() for row in data.train_x}
    assert sum(row.tobytes() in rows for row in data.validation_x) < 10  # duplicates only
