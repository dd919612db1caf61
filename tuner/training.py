"""Data-parallel training of a small classifier, in numpy, for the tuner's trials.

The model is a multi-layer perceptron (ReLU hidden layers, softmax output)
learning scikit-learn's bundled ``digits`` (8×8 images of handwritten digits,
1797 samples, shipped inside the package: nothing is downloaded at run time,
and the validation accuracy means something, unlike on synthetic data).
A fixed, seeded split keeps 20 % of it for validation, the same for every trial.

Each of the ``workers`` keeps its own replica of the parameters. Per iteration
the global batch (``batch_size`` samples drawn from ``(seed, iteration)``) is
cut into one shard per worker; each worker computes the gradient of its shard's
summed loss divided by the global batch size, so the *sum* of the workers'
gradients is the gradient of the batch's mean loss. That sum is what the
all-reduce delivers; every worker then applies the same momentum-SGD update
with weight decay to its replica. Parameters, gradients and updates are
float32; given the configuration and seed, every run computes the same bits.

The gradient is one flat float32 vector (``parameter_count`` values, the
layers' weights and biases back to back), so it crosses the network as is.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

Array = npt.NDArray[np.float32]
AllReduce = Callable[[Sequence[Array]], Sequence[Array]]
"""Sums the workers' gradients; returns what each worker received (bit-equal)."""

INPUTS = 64
CLASSES = 10
VALIDATION_FRACTION = 0.2
SPLIT_SEED = 12


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """The hyper-parameters a tuner searches, and the model's size."""

    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4
    batch_size: int = 128
    """Global batch: the samples of one iteration over all workers."""
    hidden_width: int = 512
    """Units per hidden layer; sets the gradient's size (512, 2 layers: 1.2 MB)."""
    hidden_layers: int = 2
    seed: int = 0
    """Initial weights and the batches drawn."""

    def __post_init__(self) -> None:
        problems = []
        if not self.learning_rate > 0:
            problems.append(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.momentum < 1:
            problems.append(f"momentum must be in [0, 1), got {self.momentum}")
        if not self.weight_decay >= 0:
            problems.append(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.batch_size < 1:
            problems.append(f"batch_size must be >= 1, got {self.batch_size}")
        if self.hidden_width < 1:
            problems.append(f"hidden_width must be >= 1, got {self.hidden_width}")
        if self.hidden_layers < 0:
            problems.append(f"hidden_layers must be >= 0, got {self.hidden_layers}")
        if problems:
            raise ValueError("training config: " + "; ".join(problems))

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> TrainingConfig:
        """The fields found in ``config`` (e.g. a Ray Tune trial's), defaults for the rest."""
        kinds = {"batch_size": int, "hidden_width": int, "hidden_layers": int, "seed": int}
        names = [f.name for f in fields(cls) if f.name in config]
        values: dict[str, Any] = {name: kinds.get(name, float)(config[name]) for name in names}
        return cls(**values)

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        return (INPUTS, *([self.hidden_width] * self.hidden_layers), CLASSES)


def parameter_count(config: TrainingConfig) -> int:
    sizes = config.layer_sizes
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def gradient_bytes(config: TrainingConfig) -> int:
    """Bytes of one worker's float32 gradient."""
    return 4 * parameter_count(config)


@dataclass(frozen=True, slots=True)
class Dataset:
    train_x: Array
    train_y: npt.NDArray[np.int64]
    validation_x: Array
    validation_y: npt.NDArray[np.int64]


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


@functools.cache
def digits() -> Dataset:
    """scikit-learn's digits, pixels scaled to [0, 1], split once with a fixed seed."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (np.asarray(bunch.data, dtype=np.float64) / 16.0).astype(np.float32)
    y = np.asarray(bunch.target, dtype=np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    cut = len(y) - round(VALIDATION_FRACTION * len(y))
    train, validation = order[:cut], order[cut:]
    for array in (x, y):
        array.setflags(write=False)
    return Dataset(x[train], y[train], x[validation], y[validation])


class Mlp:
    """Layer views into one flat parameter vector; forward, backward, evaluation."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(sizes)
        self.shapes: list[tuple[tuple[int, int], int]] = []
        self.count = 0
        for a, b in itertools.pairwise(self.sizes):
            self.shapes.append(((a, b), self.count))
            self.count += a * b + b

    def layers(self, flat: Array) -> list[tuple[Array, Array]]:
        """(weights, bias) views of ``flat`` for each layer."""
        views = []
        for (a, b), offset in self.shapes:
            weights = flat[offset : offset + a * b].reshape(a, b)
            views.append((weights, flat[offset + a * b : offset + a * b + b]))
        return views

    def initial(self, seed: int) -> Array:
        """He-initialised weights, zero biases."""
        rng = np.random.default_rng(seed)
        flat = np.zeros(self.count, dtype=np.float32)
        for weights, _ in self.layers(flat):
            fan_in = weights.shape[0]
            weights[...] = rng.standard_normal(weights.shape) * np.sqrt(2.0 / fan_in)
        return flat

    def _forward(self, flat: Array, x: Array) -> tuple[list[Array], Array]:
        activations = [x]
        layers = self.layers(flat)
        for weights, bias in layers[:-1]:
            activations.append(np.maximum(activations[-1] @ weights + bias, np.float32(0)))
        weights, bias = layers[-1]
        logits = activations[-1] @ weights + bias
        return activations, logits

    @staticmethod
    def _log_softmax(logits: Array) -> Array:
        shifted = logits - logits.max(axis=1, keepdims=True)
        result: Array = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return result

    def gradient(
        self, flat: Array, x: Array, y: npt.NDArray[np.int64], scale: float, out: Array
    ) -> float:
        """Write ``scale`` × d(summed cross-entropy)/d(parameters) into ``out``;
        return the summed loss."""
        activations, logits = self._forward(flat, x)
        log_p = self._log_softmax(logits)
        rows = np.arange(len(y))
        loss = float(-log_p[rows, y].sum(dtype=np.float64))
        delta = np.exp(log_p)
        delta[rows, y] -= np.float32(1)
        delta *= np.float32(scale)
        layers = self.layers(flat)
        grads = self.layers(out)
        for index in range(len(layers) - 1, -1, -1):
            grad_weights, grad_bias = grads[index]
            np.matmul(activations[index].T, delta, out=grad_weights)
            grad_bias[...] = delta.sum(axis=0)
            if index > 0:
                delta = delta @ layers[index][0].T
                delta *= activations[index] > 0
        return loss

    def evaluate(self, flat: Array, x: Array, y: npt.NDArray[np.int64]) -> tuple[float, float]:
        """Mean cross-entropy and accuracy."""
        _, logits = self._forward(flat, x)
        log_p = self._log_softmax(logits)
        loss = float(-log_p[np.arange(len(y)), y].mean(dtype=np.float64))
        accuracy = float((logits.argmax(axis=1) == y).mean())
        return loss, accuracy


@dataclass(frozen=True, slots=True)
class StepResult:
    iteration: int
    """The iteration just completed (from 0)."""
    train_loss: float
    """Mean loss of the iteration's batch, before the update."""


class DataParallelTraining:
    """``workers`` replicas of one model, trained in lock step over a gradient all-reduce."""

    def __init__(self, config: TrainingConfig, workers: int, data: Dataset | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.config = config
        self.workers = workers
        self.data = data if data is not None else digits()
        if config.batch_size < workers:
            raise ValueError(
                f"batch_size {config.batch_size} leaves some of the {workers} workers no sample"
            )
        self.model = Mlp(config.layer_sizes)
        initial = self.model.initial(config.seed)
        self.replicas = [initial.copy() for _ in range(workers)]
        self.velocities = [np.zeros_like(initial) for _ in range(workers)]
        self.iteration = 0
        """Iterations completed."""
        self._gradients = [np.empty_like(initial) for _ in range(workers)]
        self._losses = [0.0] * workers

    @property
    def parameters(self) -> Array:
        """Worker 0's replica (every replica holds the same bits)."""
        return self.replicas[0]

    def batch(self, iteration: int) -> npt.NDArray[np.int64]:
        """Indices of the iteration's global batch: a function of seed and iteration only."""
        rng = np.random.default_rng((self.config.seed, iteration))
        size = min(self.config.batch_size, len(self.data.train_y))
        return rng.choice(len(self.data.train_y), size=size, replace=False)

    def compute(self) -> list[Array]:
        """Each worker's gradient for its shard of the current iteration's batch."""
        indices = self.batch(self.iteration)
        scale = 1.0 / len(indices)
        # One BLAS thread: idle BLAS threads spin for a while after each product and
        # would take the cores the all-reduce's socket thread needs next.
        with _blas().limit(limits=1, user_api="blas"):
            for worker, shard in enumerate(np.array_split(indices, self.workers)):
                self._losses[worker] = self.model.gradient(
                    self.replicas[worker],
                    self.data.train_x[shard],
                    self.data.train_y[shard],
                    scale,
                    self._gradients[worker],
                )
        return list(self._gradients)

    def apply(self, summed: Sequence[Array]) -> StepResult:
        """Each worker updates its replica with the sum it received."""
        if len(summed) != self.workers:
            raise ValueError(f"expected {self.workers} reduced gradients, got {len(summed)}")
        reference = np.asarray(summed[0]).view(np.uint32)
        for worker, received in enumerate(summed):
            if received.shape != (self.model.count,) or received.dtype != np.float32:
                raise ValueError(
                    f"worker {worker}: reduced gradient has shape {received.shape} and dtype "
                    f"{received.dtype}, expected ({self.model.count},) float32"
                )
            if not np.array_equal(received.view(np.uint32), reference):
                raise RuntimeError(f"worker {worker} received a different sum than worker 0")
        lr = np.float32(self.config.learning_rate)
        momentum = np.float32(self.config.momentum)
        decay = np.float32(self.config.weight_decay)
        step = np.empty_like(self.replicas[0])
        for worker, received in enumerate(summed):
            params, velocity = self.replicas[worker], self.velocities[worker]
            np.multiply(params, decay, out=step)
            step += received
            velocity *= momentum
            velocity += step
            np.multiply(velocity, lr, out=step)
            params -= step
        batch = len(self.batch(self.iteration))
        result = StepResult(self.iteration, sum(self._losses) / batch)
        self.iteration += 1
        return result

    def step(self, allreduce: AllReduce) -> StepResult:
        """One iteration: shard gradients, all-reduce, update."""
        return self.apply(allreduce(self.compute()))

    def evaluate(self) -> dict[str, float]:
        with _blas().limit(limits=1, user_api="blas"):
            loss, accuracy = self.model.evaluate(
                self.parameters, self.data.validation_x, self.data.validation_y
            )
        return {"validation_loss": loss, "validation_accuracy": accuracy}

    # -- checkpoints: the state every replica shares --

    def state(self) -> dict[str, npt.NDArray[Any]]:
        return {
            "parameters": self.replicas[0].copy(),
            "velocity": self.velocities[0].copy(),
            "iteration": np.array(self.iteration, dtype=np.int64),
        }

    def load_state(self, state: Mapping[str, npt.NDArray[Any]]) -> None:
        params = np.asarray(state["parameters"])
        velocity = np.asarray(state["velocity"])
        for name, array in (("parameters", params), ("velocity", velocity)):
            if array.shape != (self.model.count,) or array.dtype != np.float32:
                raise ValueError(
                    f"checkpoint {name}: shape {array.shape} dtype {array.dtype} does not fit "
                    f"the model ({self.model.count},) float32"
                )
        for worker in range(self.workers):
            self.replicas[worker][...] = params
            self.velocities[worker][...] = velocity
        self.iteration = int(state["iteration"])


def local_sum(gradients: Sequence[Array]) -> list[Array]:
    """The all-reduce without a network, summing in worker order (for tests, baselines)."""
    total = gradients[0].copy()
    for gradient in gradients[1:]:
        total += gradient
    return [total.copy() for _ in gradients]
