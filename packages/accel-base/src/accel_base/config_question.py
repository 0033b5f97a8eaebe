"""What ``accel config`` asks about an engine: the :class:`ConfigQuestion` records an
:class:`~accel_base.engine_description.EngineDescription` lists in ``config_questions``.

The questionnaire asks an engine's questions in their order, once the user has chosen the engine,
and writes the answers under the engine's ``config_section`` (top-level keys without one). The
records are data: the launcher, which keeps no question of any engine, reads them without
importing torch, so this module imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from accel_base.engine_description import OptionValue

#: How a question is asked: a menu, yes/no, a whole number, free text.
QuestionKind = Literal["select", "confirm", "integer", "text"]
QUESTION_KINDS: tuple[QuestionKind, ...] = ("select", "confirm", "integer", "text")


@dataclass(frozen=True)
class ConfigQuestion:
    """One question of ``accel config`` about an engine.

    Attributes:
        key: the key the answer is stored under in the engine's config-file section; with
            ``stored=False``, only the name later questions' ``when`` refer to.
        prompt: the question as the user reads it.
        kind: ``"select"`` (a menu of ``choices``), ``"confirm"`` (yes/no: a bool),
            ``"integer"`` (a whole number ``>= minimum``) or ``"text"``.
        choices: a select's choices, in menu order; the answer stored is the choice itself, so
            ``(0, 1, 2, 3)`` stores an int. ``None``: those of the description's launch option
            or config key named ``key``.
        default: the answer preselected (for a select, the choice itself, compared as text).
            An integer question needs an int.
        when: ask only when each earlier answer named has one of the values given
            (``{"zero_stage": (3,)}``); a question not asked counts as having no value, so every
            condition on it is false.
        minimum: the smallest number an integer question takes.
        required: a text question refuses a blank answer.
        omit_empty: a text answer is stored stripped of surrounding blanks, and left out of the
            section when nothing remains.
        stored: whether the answer is written; ``False`` for a question that only decides which
            later ones are asked (DeepSpeed's "Do you have a DeepSpeed JSON config file?").
    """

    key: str
    prompt: str
    kind: QuestionKind = "select"
    choices: tuple[OptionValue, ...] | None = None
    default: OptionValue = None
    when: Mapping[str, tuple[OptionValue, ...]] = field(default_factory=dict)
    minimum: int = 0
    required: bool = False
    omit_empty: bool = False
    stored: bool = True

    def __post_init__(self) -> None:
        if self.kind not in QUESTION_KINDS:
            raise ValueError(
                f"config question {self.key!r}: kind={self.kind!r} is not one of "
                f"{', '.join(QUESTION_KINDS)}"
            )
        if self.kind == "integer" and (
            not isinstance(self.default, int) or isinstance(self.default, bool)
        ):
            raise ValueError(
                f"config question {self.key!r}: an integer question needs an int default, "
                f"got {self.default!r}"
            )
        if self.choices is not None and self.kind != "select":
            raise ValueError(
                f"config question {self.key!r}: choices are for kind='select', not {self.kind!r}"
            )

    def applies(self, answers: Mapping[str, OptionValue]) -> bool:
        """Whether to ask this question, given the answers so far (by key, stored or not)."""
        return all(key in answers and answers[key] in values for key, values in self.when.items())
