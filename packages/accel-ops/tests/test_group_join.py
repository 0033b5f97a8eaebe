"""Forming a process group under torch's elastic agent: a key space per attempt, and a bounded
meeting that names who never came. Real TCP stores on loopback; nothing is mocked."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from accel_ops.group_join import (
    DEFAULT_JOIN_TIMEOUT,
    GroupFormationError,
    elastic_store,
    join_timeout,
    report_fewer_machines,
)
from accel_ops.launch_environment import LaunchEnvironment


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment(monkeypatch, rank: int, world: int, port: int, **extra: str) -> LaunchEnvironment:
    values = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank % 2),
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        **extra,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return LaunchEnvironment.from_environ(values)


def test_join_timeout_variable(monkeypatch):
    assert join_timeout({}) == DEFAULT_JOIN_TIMEOUT
    assert join_timeout({"ACCEL_JOIN_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValueError, match=r"ACCEL_JOIN_TIMEOUT=.* is not a number of seconds"):
            join_timeout({"ACCEL_JOIN_TIMEOUT": bad})


def test_a_rank_that_never_comes_is_named_within_the_timeout(monkeypatch):
    # rank 0 of 4 (2 machines of 2) hosts the store; ranks 1 and 3 come, rank 2 never does
    port = _free_port()
    env = _environment(monkeypatch, 0, 4, port, ACCEL_JOIN_TIMEOUT="2")
    clients = []

    def arrive(rank: int) -> None:
        client = dist.TCPStore("127.0.0.1", port, 4, is_master=False, timeout=timedelta(30))
        dist.PrefixStore("accel", client).set(f"joined/{rank}", "peer")
        clients.append(client)

    threads = [threading.Thread(target=arrive, args=(rank,)) for rank in (1, 3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    with pytest.raises(GroupFormationError) as caught:
        elastic_store(env, timedelta(seconds=60))
    for thread in threads:
        thread.join()
    assert time.monotonic() - started < 20
    assert str(caught.value) == (
        "rank 0: the process group of 4 processes did not form within 2 s (ACCEL_JOIN_TIMEOUT); "
        "still missing: rank(s) 2 (on machine 1, 2 processes per machine). Check that machine's "
        "launcher and its output (it may have failed to start, or be unable to reach the main "
        "machine)."
    )


def test_each_attempt_meets_in_its_own_key_space_of_the_agents_store(monkeypatch):
    # the agent's store outlives a restart with attempt 0's arrivals: attempt 1 must not see them
    port = _free_port()
    agent = dist.TCPStore("127.0.0.1", port, None, is_master=True, wait_for_workers=False)
    agent.set("accel/attempt_0/joined/1", "a worker of the first attempt, now dead")
    extra = {"TORCHELASTIC_USE_AGENT_STORE": "True", "ACCEL_JOIN_TIMEOUT": "2"}
    env = _environment(monkeypatch, 0, 2, port, TORCHELASTIC_RESTART_COUNT="1", **extra)
    with pytest.raises(GroupFormationError, match=r"still missing: rank\(s\) 1 \(on machine 0"):
        elastic_store(env, timedelta(seconds=60))
    assert agent.check(["accel/attempt_1/joined/0"])


def test_an_unreachable_store_is_named(monkeypatch):
    port = _free_port()  # nothing listens there
    extra = {"TORCHELASTIC_USE_AGENT_STORE": "True", "ACCEL_JOIN_TIMEOUT": "1"}
    env = _environment(monkeypatch, 1, 2, port, **extra)
    with pytest.raises(
        GroupFormationError,
        match=f"rank 1 could not reach the elastic agent's store at 127.0.0.1:{port} within 1 s",
    ):
        elastic_store(env, timedelta(seconds=60))


def test_fewer_machines_than_launched_is_said(capsys, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    base = {"LOCAL_WORLD_SIZE": "2", "ACCEL_NUM_MACHINES": "3", "TORCHELASTIC_RESTART_COUNT": "2"}
    fewer = LaunchEnvironment.from_environ({**base, "WORLD_SIZE": "4"})
    assert report_fewer_machines(fewer)
    assert capsys.readouterr().err.startswith(
        "accel: attempt 2 goes on with 2 of the 3 machines launched (4 processes)"
    )
    full = LaunchEnvironment.from_environ({**base, "WORLD_SIZE": "6"})
    assert not report_fewer_machines(full)
