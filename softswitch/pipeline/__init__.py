"""Executable v1model pipeline: parser, checksums, ingress | egress, deparser.

The traffic manager sits between :meth:`Pipeline.ingress` and
:meth:`Pipeline.egress`; it sees only :class:`Queued` (port, class, length).
"""

from __future__ import annotations

from softswitch.pipeline.core import DROP_PORT, Pipeline, PipelineError, Queued

__all__ = ["DROP_PORT", "Pipeline", "PipelineError", "Queued"]
