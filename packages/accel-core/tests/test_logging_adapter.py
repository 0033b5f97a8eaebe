"""get_logger returns a MultiProcessAdapter; the level comes from ACCEL_LOG_LEVEL, then from
Accelerate's ACCELERATE_LOG_LEVEL."""

from __future__ import annotations

import logging

import pytest

from accel_core.process_logging import MultiProcessAdapter, get_logger
from accel_ops import PartialState


@pytest.fixture(autouse=True)
def no_level_variables(monkeypatch):
    monkeypatch.delenv("ACCEL_LOG_LEVEL", raising=False)
    monkeypatch.delenv("ACCELERATE_LOG_LEVEL", raising=False)


def test_get_logger_returns_a_multi_process_adapter_around_the_named_logger():
    adapter = get_logger("accel_test.adapter")
    assert isinstance(adapter, MultiProcessAdapter)
    assert isinstance(adapter, logging.LoggerAdapter)
    assert adapter.logger is logging.getLogger("accel_test.adapter")


def test_the_adapter_can_be_built_directly_as_in_accelerate(caplog):
    PartialState._reset_state()
    PartialState(cpu=True)
    adapter = MultiProcessAdapter(logging.getLogger("accel_test.direct"), {})
    with caplog.at_level(logging.INFO, logger="accel_test.direct"):
        adapter.info("hello", main_process_only=False)
    assert [record.getMessage() for record in caplog.records] == ["[RANK 0] hello"]
    PartialState._reset_state()


def test_accelerates_variable_sets_the_level_when_ours_is_unset(monkeypatch):
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "error")
    assert get_logger("accel_test.level_a").logger.level == logging.ERROR
    monkeypatch.setenv("ACCEL_LOG_LEVEL", "debug")  # ours wins when both are set
    assert get_logger("accel_test.level_b").logger.level == logging.DEBUG
    assert get_logger("accel_test.level_c", log_level="WARNING").logger.level == logging.WARNING


def test_a_bad_level_names_the_variable_it_came_from(monkeypatch):
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "loud")
    with pytest.raises(ValueError, match="ACCELERATE_LOG_LEVEL='loud' is not a logging level"):
        get_logger("accel_test.level_bad")
