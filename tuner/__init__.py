"""Beamer for Ray Tune users: HyperBand rungs as Beamer stages, trials over the switch."""
