"""What ``accel config`` asks about an engine: defined in :mod:`accel_base.config_question`
(accel-base, standard library only, which the launcher imports without torch). This module path
stays, re-exporting the same objects.
"""

from __future__ import annotations

from accel_base.config_question import (
    QUESTION_KINDS,
    ConfigQuestion,
    QuestionKind,
)

__all__ = [
    "QUESTION_KINDS",
    "ConfigQuestion",
    "QuestionKind",
]
