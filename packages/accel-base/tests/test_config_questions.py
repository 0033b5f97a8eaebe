"""The questions ``accel config`` asks about an engine are records in its description: their
conditions, and the checks a description makes of its questions and renamed keys."""

from __future__ import annotations

import pytest

from accel_base.config_question import ConfigQuestion
from accel_base.engine_description import ConfigKey, EngineDescription, LaunchOption

_OPTIONS = (
    LaunchOption("mode", "Mode.", choices=("fast", "safe")),
    LaunchOption("note", "A note."),
)


def _engine(**fields: object) -> EngineDescription:
    return EngineDescription(
        name="x", title="X", strategy="m:S", install="x", launch_options=_OPTIONS, **fields
    )


def test_a_question_applies_when_each_named_answer_is_one_of_its_values():
    question = ConfigQuestion("level", "Level?", kind="integer", default=1, when={"stage": (3,)})
    assert question.applies({"stage": 3})
    assert not question.applies({"stage": 2})
    assert not question.applies({})  # not asked: no value, so the condition is false
    assert ConfigQuestion("mode", "Mode?").applies({})  # no condition


def test_a_question_refuses_what_it_cannot_ask():
    with pytest.raises(ValueError, match="kind='slider' is not one of select, confirm"):
        ConfigQuestion("k", "K?", kind="slider")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs an int default"):
        ConfigQuestion("k", "K?", kind="integer")
    with pytest.raises(ValueError, match="choices are for kind='select'"):
        ConfigQuestion("k", "K?", kind="confirm", choices=(True, False))


def test_descriptions_default_to_no_questions_on_gpus():
    plain = _engine()
    assert plain.config_questions == () and plain.runs_on_gpus is True
    assert plain.renamed_config_keys == {}


def test_a_select_without_choices_needs_an_option_or_key_that_has_some():
    _engine(config_questions=(ConfigQuestion("mode", "Mode?"),))
    _engine(
        config_keys={"launcher": ConfigKey("str", "launcher", choices=("a", "b"))},
        config_questions=(ConfigQuestion("launcher", "Launcher?"),),
    )
    with pytest.raises(ValueError, match="'note' is a select with no choices"):
        _engine(config_questions=(ConfigQuestion("note", "Note?"),))
    with pytest.raises(ValueError, match="'missing' is a select with no choices"):
        _engine(config_questions=(ConfigQuestion("missing", "Missing?"),))


def test_renamed_keys_rename_an_undeclared_key_to_a_declared_one():
    assert _engine(renamed_config_keys={"old_mode": "mode"}).renamed_config_keys == {
        "old_mode": "mode"
    }
    with pytest.raises(ValueError, match="'old_mode' -> 'missing' must rename"):
        _engine(renamed_config_keys={"old_mode": "missing"})
    with pytest.raises(ValueError, match="'note' -> 'mode' must rename"):
        _engine(renamed_config_keys={"note": "mode"})
