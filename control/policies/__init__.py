"""Scheduling policies, one module each, behind :class:`control.policies.base.Policy`."""
