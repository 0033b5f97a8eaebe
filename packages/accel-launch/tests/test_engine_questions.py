"""An engine's ``accel config`` questions and its renamed keys come from its description: an
installed engine that lists ``config_questions`` is asked about, its answers land in its section,
and ``accel config update`` renames the keys it says it renamed, with nothing in the launcher
edited."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

import accel_launch.devices
from accel_base.config_question import ConfigQuestion
from accel_base.engine_description import EngineDescription, LaunchOption
from accel_launch import load_config, save_config
from accel_launch.config import questionnaire, schema
from accel_launch.config.files import update_config
from accel_launch.launch import engines, options

FIXTURE_ENGINE = EngineDescription(
    name="fixture",
    title="Fixture engine",
    strategy="fixture_engine.strategy:FixtureStrategy",
    install="fixture-engine",
    distributed_type="FIXTURE",
    launch_options=(
        LaunchOption("fixture_stage", "Stage.", kind="int", choices=(1, 2)),
        LaunchOption("fixture_mode", "Mode.", choices=("fast", "safe")),
        LaunchOption("fixture_level", "Level.", kind="int"),
        LaunchOption("fixture_note", "A note."),
    ),
    config_section="fixture_config",
    config_questions=(
        ConfigQuestion("fixture_stage", "Which fixture stage?", choices=(2, 1), default=2),
        ConfigQuestion("fixture_mode", "Which fixture mode?", default="safe"),
        ConfigQuestion(
            "wants_level", "Set a fixture level?", kind="confirm", default=False, stored=False
        ),
        ConfigQuestion(
            "fixture_level",
            "Which fixture level?",
            kind="integer",
            default=3,
            minimum=1,
            when={"wants_level": (True,)},
        ),
        ConfigQuestion("fixture_note", "A fixture note?", kind="text", omit_empty=True),
    ),
    runs_on_gpus=False,
    renamed_config_keys={"fixture_old_mode": "fixture_mode"},
)


@pytest.fixture
def with_fixture_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The launcher with the fixture engine installed next to the real ones."""
    cached = (options.launch_options, schema.sections, schema.top_keys)
    installed = {**engines.installed(), FIXTURE_ENGINE.name: FIXTURE_ENGINE}
    monkeypatch.setattr(engines, "installed", lambda: installed)
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()


class _Terminal:
    def isatty(self) -> bool:
        return True


Asked = list[tuple[str, str, object]]


def scripted(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, str | int | bool]
) -> tuple[Asked, Callable[[], dict[str, object]]]:
    """``ask_config`` answering from ``answers`` by prompt (the default where none is given) on a
    machine with two GPUs; returns the questions asked, (kind, prompt, choices or default), and
    the function to call."""
    asked: Asked = []

    class Scripted:
        def select(self, message: str, choices: list[str], default: str | None = None) -> str:
            asked.append(("select", message, choices))
            return str(answers.get(message, default or choices[0]))

        def confirm(self, message: str, default: bool = False) -> bool:
            asked.append(("confirm", message, default))
            return bool(answers.get(message, default))

        def text(self, message: str, default: str = "", *rest: object) -> str:
            asked.append(("text", message, default))
            return str(answers.get(message, default))

        def integer(self, message: str, default: int, minimum: int = 0) -> int:
            asked.append(("integer", message, (default, minimum)))
            return int(answers.get(message, default))

    monkeypatch.setattr(questionnaire, "_Asker", Scripted)
    monkeypatch.setattr("sys.stdin", _Terminal())
    monkeypatch.setattr(accel_launch.devices, "count_cuda_devices", lambda: 2)
    return asked, questionnaire.ask_config


KIND = "Which kind of distributed training?"


def test_its_questions_are_asked_and_a_conditional_one_skipped(
    monkeypatch: pytest.MonkeyPatch, with_fixture_engine: None
):
    asked, ask_config = scripted(monkeypatch, {KIND: "Fixture engine"})
    config = ask_config()
    assert config["distributed_type"] == "FIXTURE"
    # stored as the choice itself (an int), the condition's answer not stored, a blank note left out
    assert config["fixture_config"] == {"fixture_stage": 2, "fixture_mode": "safe"}
    engine_questions = [entry for entry in asked if "fixture" in entry[1]]
    assert engine_questions == [
        ("select", "Which fixture stage?", ["2", "1"]),
        ("select", "Which fixture mode?", ["fast", "safe"]),  # the launch option's choices
        ("confirm", "Set a fixture level?", False),
        ("text", "A fixture note?", ""),
    ]
    assert not any("Which GPUs" in prompt for _, prompt, _ in asked)  # runs_on_gpus=False
    assert schema.validate(config) == config


def test_a_conditional_question_is_asked_when_its_condition_holds(
    monkeypatch: pytest.MonkeyPatch, with_fixture_engine: None, tmp_path: Path
):
    answers: dict[str, str | int | bool] = {
        KIND: "Fixture engine",
        "Which fixture stage?": "1",
        "Which fixture mode?": "fast",
        "Set a fixture level?": True,
        "Which fixture level?": 5,
        "A fixture note?": "  keep me  ",
    }
    asked, ask_config = scripted(monkeypatch, answers)
    config = ask_config()
    assert ("integer", "Which fixture level?", (3, 1)) in asked
    assert config["fixture_config"] == {
        "fixture_stage": 1,
        "fixture_mode": "fast",
        "fixture_level": 5,
        "fixture_note": "keep me",
    }
    assert not any("Which GPUs" in prompt for _, prompt, _ in asked)
    assert load_config(save_config(config, tmp_path / "fixture.yaml")) == config


def test_an_engine_without_questions_gets_none_and_is_asked_for_gpus(
    monkeypatch: pytest.MonkeyPatch,
):
    quiet = EngineDescription(
        name="quiet", title="Quiet engine", strategy="m:S", install="quiet", distributed_type="Q"
    )
    installed = {**engines.installed(), quiet.name: quiet}
    monkeypatch.setattr(engines, "installed", lambda: installed)
    _, ask_config = scripted(monkeypatch, {KIND: "Quiet engine"})
    config = ask_config()
    assert config["distributed_type"] == "Q" and config["gpu_ids"] == "all"
    assert "quiet_config" not in config


def test_update_renames_the_keys_the_description_renamed(with_fixture_engine: None, tmp_path: Path):
    path = tmp_path / "old.yaml"
    path.write_text(
        "distributed_type: FIXTURE\nfixture_config:\n  fixture_old_mode: SAFE\n  fixture_level: 2\n"
    )
    # the older key is read like the newer one (its choices, its help)
    assert load_config(path)["fixture_config"] == {"fixture_old_mode": "safe", "fixture_level": 2}
    assert schema.sections()["fixture_config"]["fixture_old_mode"].help == (
        "older name of fixture_mode"
    )
    update_config(path)
    written = yaml.safe_load(path.read_text())
    assert written["fixture_config"] == {"fixture_mode": "safe", "fixture_level": 2}


def test_update_keeps_the_newer_key_when_a_file_has_both(with_fixture_engine: None, tmp_path: Path):
    path = tmp_path / "both.yaml"
    path.write_text(
        "distributed_type: FIXTURE\nfixture_config:\n  fixture_old_mode: safe\n"
        "  fixture_mode: fast\n"
    )
    update_config(path)
    assert load_config(path)["fixture_config"] == {"fixture_mode": "fast"}
