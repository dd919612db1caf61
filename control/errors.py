"""User-facing errors: the CLI prints them as one line and exits with status 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (file, flag, event); the message names where and what."""

    exit_status = 2
