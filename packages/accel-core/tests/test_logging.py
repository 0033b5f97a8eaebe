"""get_logger: main-process-only, all-process and in-order records, levels, warning_once."""

from __future__ import annotations

import inspect
import logging
import os
import time
from pathlib import Path

import pytest

from accel_core.process_logging import get_logger
from accel_ops import PartialState
from accel_testing import run_workers


@pytest.fixture
def state():
    PartialState._reset_state()
    yield PartialState(cpu=True)
    PartialState._reset_state()


def test_logging_before_the_state_exists_is_an_error():
    PartialState._reset_state()
    logger = get_logger("accel_test.no_state", log_level="INFO")
    with pytest.raises(RuntimeError, match=r"create PartialState\(\) or Accelerator\(\)"):
        logger.info("too early")


def test_records_carry_the_rank_and_the_callers_line(state, caplog):
    logger = get_logger("accel_test.caller", log_level="DEBUG")
    with caplog.at_level(logging.DEBUG, logger="accel_test.caller"):
        logger.debug("hello %s", "world")
        line = inspect.currentframe().f_lineno - 1
        logger.info("everyone", main_process_only=False)
        logger.info("in order", in_order=True)
    assert [r.getMessage() for r in caplog.records] == [
        "[RANK 0] hello world",
        "[RANK 0] everyone",
        "[RANK 0] in order",
    ]
    assert caplog.records[0].filename == "test_logging.py"
    assert caplog.records[0].lineno == line


def test_warning_once(state, caplog):
    logger = get_logger("accel_test.once")
    with caplog.at_level(logging.WARNING, logger="accel_test.once"):
        for _ in range(3):
            logger.warning_once("deprecated %s", "thing")
        logger.warning_once("another")
    assert [r.getMessage() for r in caplog.records] == [
        "[RANK 0] deprecated thing",
        "[RANK 0] another",
    ]
    assert caplog.records[0].filename == "test_logging.py"


def test_level_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_LOG_LEVEL", "debug")
    assert get_logger("accel_test.env").logger.level == logging.DEBUG
    assert get_logger("accel_test.arg", log_level="error").logger.level == logging.ERROR
    monkeypatch.setenv("ACCEL_LOG_LEVEL", "LOUD")
    with pytest.raises(ValueError, match="ACCEL_LOG_LEVEL='LOUD' is not a logging level"):
        get_logger("accel_test.bad")


def logging_worker():
    """Each rank logs to its own file; the in-order section also goes to one shared file."""
    state = PartialState()
    rank = state.process_index
    out = Path(os.environ["OUT"])
    logger = get_logger("accel_test.workers", log_level="INFO")
    own = logging.FileHandler(out / f"rank{rank}.log")
    logger.logger.addHandler(own)
    logger.info("main only")
    logger.info("everyone", main_process_only=False)
    logger.debug("below the level", main_process_only=False)
    logger.warning_once("once")
    logger.warning_once("once")
    state.wait_for_everyone()
    shared = logging.FileHandler(out / "ordered.log")
    logger.logger.addHandler(shared)
    for step in range(3):
        if rank == 0:
            time.sleep(0.3)  # without in_order, rank 1's line would land first
        logger.info(f"step {step}", in_order=True)
    state.destroy_process_group()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes(tmp_path):
    run_workers(2, function=f"{__file__}::logging_worker", env={"OUT": str(tmp_path)}, timeout=90)
    rank0 = (tmp_path / "rank0.log").read_text().splitlines()
    rank1 = (tmp_path / "rank1.log").read_text().splitlines()
    steps = [f"step {i}" for i in range(3)]
    assert rank0 == [f"[RANK 0] {m}" for m in ["main only", "everyone", "once", *steps]]
    assert rank1 == [f"[RANK 1] {m}" for m in ["everyone", *steps]]
    ordered = (tmp_path / "ordered.log").read_text().splitlines()
    assert ordered == [f"[RANK {r}] step {i}" for i in range(3) for r in (0, 1)]
