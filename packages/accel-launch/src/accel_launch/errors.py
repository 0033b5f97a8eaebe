"""The errors the ``accel`` command reports: one line that says what was wrong and how to fix it."""

from __future__ import annotations


class AccelLaunchError(Exception):
    """A problem the user can fix (bad flag, config value, environment); shown without traceback."""


class ConfigError(AccelLaunchError, ValueError):
    """A config file, flag or environment value that is unknown or not allowed."""
