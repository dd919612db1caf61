"""Beamer control plane: model, policies, quantisation, P4Runtime client, controller."""

# Before any module of the package imports numba: where its kernels' cache goes.
import control.numba_cache  # noqa: F401
