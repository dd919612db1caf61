"""Topology files and the namespace launcher for emulation runs."""
