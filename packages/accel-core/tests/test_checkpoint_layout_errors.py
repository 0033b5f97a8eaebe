"""The error for a checkpoint folder no layout reads: what the installed engines' layout hooks
look for comes from them (their ``looks_for``), and with none installed, what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel_base.engine_description import EngineDescription
from accel_core.built_in_engines import ENGINE_HINT
from accel_core.checkpointing import CheckpointError, CheckpointReader, layouts


def find_nothing(reader, index):
    """A layout hook that never finds its layout, and says what it looks for."""
    return None


find_nothing.looks_for = lambda index: f"shards_{index}/"


def find_quietly(reader, index):
    """A layout hook that says nothing about what it looks for."""
    return None


ENGINES = {
    "blocks": EngineDescription(
        name="blocks",
        title="Blocks",
        strategy="m:S",
        install="blocks",
        checkpoint_layouts=(f"{__name__}:find_nothing",),
    ),
    "quiet": EngineDescription(
        name="quiet",
        title="Quiet",
        strategy="m:S",
        install="quiet",
        checkpoint_layouts=(f"{__name__}:find_quietly",),
    ),
}


def _error(folder: Path, monkeypatch: pytest.MonkeyPatch, engines: dict) -> str:
    monkeypatch.setattr("accel_base.engine_description.installed_engines", lambda: engines)
    (folder / "random_states_0.pkl").write_bytes(b"")
    with pytest.raises(CheckpointError) as caught:
        layouts.find_layout(CheckpointReader(folder, None), 1, loading="ddp")
    return str(caught.value)


def test_the_error_lists_what_the_installed_engines_look_for(tmp_path, monkeypatch):
    message = _error(tmp_path, monkeypatch, ENGINES)
    assert "has no weights for model 1 in any layout strategy 'ddp' can convert: expected " in (
        message
    )
    assert (
        "(full files), or a layout an installed engine reads (Blocks's shards_1/, what Quiet "
        "writes); it holds random_states_0.pkl. Was it saved with fewer prepared models"
    ) in message


def test_with_no_engine_installed_the_error_says_what_to_install(tmp_path, monkeypatch):
    message = _error(tmp_path, monkeypatch, {})
    assert f"(full files), or no installed engine reads another layout: {ENGINE_HINT[:-1]}; " in (
        message
    )
