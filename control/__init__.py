"""Beamer control plane: model, policies, quantisation, P4Runtime client, controller."""
