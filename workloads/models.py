"""The deep-learning models that tuning trials train, with their sources.

Two facts per model drive the network: how many bytes one synchronisation
moves (parameters × 4 bytes, FP32 gradients) and how long one iteration
computes between two synchronisations (per-GPU batch / per-GPU throughput).

Sources (read, not copied):

* Parameter counts: "Keras Applications" model table, keras.io (Keras team),
  counts with the classification top included; AlexNet from Krizhevsky,
  Sutskever and Hinton, "ImageNet Classification with Deep Convolutional Neural
  Networks", NeurIPS 2012 (about 60 million parameters).
* Throughput: "Benchmarks" page of the TensorFlow performance guide
  (TensorFlow authors, tests dated May 2017): tf_cnn_benchmarks training on
  ImageNet-shaped synthetic data, one NVIDIA Tesla P100 of a DGX-1, per-GPU
  batch 64 (AlexNet 512). All rows come from the same page and the same GPU, so
  the models' relative compute times are consistent with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from control.errors import UserError

BYTES_PER_PARAMETER = 4
"""FP32 gradients: each synchronisation moves one 4-byte value per parameter."""


@dataclass(frozen=True, slots=True)
class DlModel:
    """A model as the network sees it: bytes per synchronisation, compute per iteration."""

    name: str
    parameters: int
    batch_per_gpu: int
    images_per_s_per_gpu: float
    source: str

    @property
    def sync_bytes(self) -> int:
        """Bytes of one full model (or gradient) copy."""
        return self.parameters * BYTES_PER_PARAMETER

    @property
    def compute_s(self) -> float:
        """Seconds one worker computes one iteration (forward + backward on its batch)."""
        return self.batch_per_gpu / self.images_per_s_per_gpu


_TF_P100 = "TensorFlow Benchmarks guide (2017), 1x Tesla P100, synthetic ImageNet"

MODELS: dict[str, DlModel] = {
    model.name: model
    for model in (
        # Keras Applications: ResNet50 25,636,712 parameters.
        DlModel("resnet50", 25_636_712, 64, 219.0, _TF_P100),
        # Keras Applications: VGG16 138,357,544 parameters.
        DlModel("vgg16", 138_357_544, 64, 154.0, _TF_P100),
        # Keras Applications: ResNet152 60,419,944 parameters.
        DlModel("resnet152", 60_419_944, 64, 91.8, _TF_P100),
        # Keras Applications: InceptionV3 23,851,784 parameters.
        DlModel("inception_v3", 23_851_784, 64, 142.0, _TF_P100),
        # Krizhevsky et al. 2012: about 60 million parameters.
        DlModel("alexnet", 60_000_000, 512, 2987.0, _TF_P100),
    )
}


def get_model(name: str) -> DlModel:
    """The table entry for ``name``; unknown names are a user error listing the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise UserError(f"unknown model {name!r} (known: {known})") from None
