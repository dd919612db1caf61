"""Flow-level (fluid) simulator of a big switch."""

# Before any module of the package imports numba: where its kernels' cache goes.
import control.numba_cache  # noqa: F401
