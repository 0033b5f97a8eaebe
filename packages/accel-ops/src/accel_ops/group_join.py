"""Meeting in a fresh key space under torch's elastic agent, within a bounded time.

Under torch's elastic agent (``accel launch``, ``torchrun``) the workers of every attempt meet
in a TCP store. Where that store is the agent's own (``TORCHELASTIC_USE_AGENT_STORE=True``: the
``static`` rendezvous always, ``c10d`` unless ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``) it
outlives a restart with every key the first attempt wrote, and torch's ``env://`` reads the
same keys on every attempt: a restarted rank can read a dead peer's address (gloo's
"connectFullMesh failed ... Connection refused") or wait for a peer that already left.

:func:`elastic_store` gives each attempt a key space of its own (``accel/attempt_<n>/``, ``n``
being ``TORCHELASTIC_RESTART_COUNT``, which every agent of a static rendezvous increases
together) and makes the ranks meet there first, in a barrier bounded by ``join_timeout``
(``ACCEL_JOIN_TIMEOUT``, default :data:`DEFAULT_JOIN_TIMEOUT` seconds). When it runs out, the
error names the ranks that never came and the machines they belong to. A store the group's own
rank 0 hosts (``c10d`` with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, what ``accel launch`` sets)
is new every round and needs no key space; the bounded meeting applies to it as well.
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta

import torch.distributed as dist

from accel_base.env_values import seconds
from accel_ops.launch_environment import LaunchEnvironment

#: Seconds the ranks of a new group wait for each other before the error names who is missing.
DEFAULT_JOIN_TIMEOUT = 300.0
JOIN_TIMEOUT_VARIABLE = "ACCEL_JOIN_TIMEOUT"


class GroupFormationError(RuntimeError):
    """The process group could not form in time: a rank or a machine never came."""


def under_elastic_agent(environ: dict[str, str] | None = None) -> bool:
    """Whether torch's elastic agent started this process (it sets the restart count)."""
    return "TORCHELASTIC_RESTART_COUNT" in (os.environ if environ is None else environ)


def join_timeout(environ: dict[str, str] | None = None) -> float:
    """``ACCEL_JOIN_TIMEOUT`` in seconds (more than 0), else :data:`DEFAULT_JOIN_TIMEOUT`."""
    environ = os.environ if environ is None else environ
    return seconds(environ, JOIN_TIMEOUT_VARIABLE, DEFAULT_JOIN_TIMEOUT)


def report_fewer_machines(env: LaunchEnvironment) -> bool:
    """Say so (on stderr) when this attempt runs on fewer machines than were launched (an elastic
    range, ``--num_machines MIN:MAX``, after a machine was lost); returns whether it does."""
    machines = max(env.world_size // max(env.local_world_size, 1), 1)
    if machines >= env.num_machines:
        return False
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    print(
        f"accel: attempt {attempt} goes on with {machines} of the {env.num_machines} machines "
        f"launched ({env.world_size} processes); it resumes from its latest checkpoint.",
        file=sys.stderr,
        flush=True,
    )
    return True


def _machine_of(rank: int, env: LaunchEnvironment) -> int:
    return rank // max(env.local_world_size, 1)


def _describe_missing(missing: list[int], env: LaunchEnvironment) -> str:
    machines = sorted({_machine_of(rank, env) for rank in missing})
    ranks = ", ".join(str(rank) for rank in missing)
    where = ", ".join(str(machine) for machine in machines)
    noun = "machine" if len(machines) == 1 else "machines"
    return f"rank(s) {ranks} (on {noun} {where}, {env.local_world_size} processes per machine)"


def elastic_store(env: LaunchEnvironment, timeout: timedelta) -> dist.Store:
    """The store this attempt's process group forms in, once every rank has come.

    ``timeout`` becomes the store's timeout once the group has met (the process group's own).
    Raises :class:`GroupFormationError` when the store can't be reached, or a rank hasn't come,
    within :func:`join_timeout` seconds.
    """
    if env.master_port is None:
        raise GroupFormationError("MASTER_PORT is not set; torch's elastic agent sets it")
    environ = dict(os.environ)
    waiting = join_timeout(environ)
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    try:
        store = dist.TCPStore(
            env.master_addr,
            env.master_port,
            env.world_size,
            is_master=not agent_store and env.rank == 0,
            timeout=timedelta(seconds=waiting),
            wait_for_workers=False,
            multi_tenant=not agent_store,
        )
    except (RuntimeError, OSError) as error:
        host = "the elastic agent's" if agent_store else "rank 0's"
        raise GroupFormationError(
            f"rank {env.rank} could not reach {host} store at {env.master_addr}:"
            f"{env.master_port} within {waiting:g} s ({JOIN_TIMEOUT_VARIABLE}): {error}. Is "
            f"machine 0 up, and is that address reachable from machine {env.group_rank}?"
        ) from None
    # The agent's store outlives restarts: a key space per attempt (agents of a static rendezvous
    # restart together, so they agree on the count). A store of the group's own rank 0 is new
    # every round, and the restart counts of its machines may differ (a replacement starts at 0).
    prefix = f"accel/attempt_{attempt}" if agent_store else "accel"  # PrefixStore adds a "/"
    space: dist.Store = dist.PrefixStore(prefix, store)
    _meet(space, env, waiting)
    store.set_timeout(timeout)
    return space


def _meet(store: dist.Store, env: LaunchEnvironment, waiting: float) -> None:
    """Every rank writes its arrival, then waits for all the others' (bounded)."""
    store.set(f"joined/{env.rank}", f"{socket.gethostname()}:{os.getpid()}")
    keys = [f"joined/{rank}" for rank in range(env.world_size)]
    try:
        store.wait(keys, timedelta(seconds=waiting))
    except RuntimeError:  # torch's DistStoreError: the wait timed out
        missing = [rank for rank, key in enumerate(keys) if not store.check([key])]
        if not missing:
            return
        raise GroupFormationError(
            f"rank {env.rank}: the process group of {env.world_size} processes did not form "
            f"within {waiting:g} s ({JOIN_TIMEOUT_VARIABLE}); still missing: "
            f"{_describe_missing(missing, env)}. Check that machine's launcher and its output "
            "(it may have failed to start, or be unable to reach the main machine)."
        ) from None
