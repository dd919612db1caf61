"""Embedded P4 target: P4-16 frontend, pipeline, traffic manager, ports, P4Runtime server."""
