"""Start a training function on several processes from Python: a notebook, a test, a debugger.

Both launchers go through torch's elastic agent
(``torch.distributed.launcher.api.elastic_launch``, what ``torchrun`` runs) by the same code as
``accel launch`` (:mod:`accel_base.elastic_agent`), so each worker sees the usual launch
environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ...) plus
the ``ACCEL_*`` variables of docs/reference/environment.md, and builds its state from them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any


class WorkerProcessError(RuntimeError):
    """One or more launched processes raised or died; ``failed_ranks`` maps rank to its error."""

    def __init__(self, message: str, failed_ranks: dict[int, str]) -> None:
        super().__init__(message)
        self.failed_ranks = failed_ranks


@contextlib.contextmanager
def _patched_environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` and put back what was there before on exit."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _check_picklable(function: Callable[..., Any], launcher: str) -> None:
    try:
        pickle.dumps(function)
    except Exception as exc:
        name = getattr(function, "__qualname__", repr(function))
        raise TypeError(
            f"{launcher} needs a function defined with `def` at the top level of a module or "
            f"notebook cell, because it is sent to the worker processes by reference; got "
            f"{name!r}, which can't be pickled ({exc}). Move it to the top level (no lambda, no "
            f"nested function) and pass what it needs through args=(...)."
        ) from None


class _Entrypoint:
    """Calls the user's function and drops its result: the elastic agent pickles what a worker
    returns, and a result that can't be pickled would fail the worker after its work is done."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.__name__ = getattr(function, "__name__", type(function).__name__)
        self.__qualname__ = getattr(function, "__qualname__", self.__name__)

    def __call__(self, *args: Any) -> None:
        self.function(*args)


def _accel_state_initialized() -> bool:
    """Whether accel's process state exists here already (forked workers would inherit it)."""
    ops = sys.modules.get("accel_ops")  # not imported yet: no state either
    return ops is not None and bool(ops.is_initialized())


def _check_parent_is_clean(launcher: str, start_method: str) -> None:
    """Refuse to start workers from a process whose state they would inherit or clash with."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise RuntimeError(
            f"{launcher} was called in a process that already has a torch.distributed process "
            f"group (world size {torch.distributed.get_world_size()}). Create the Accelerator or "
            f"PartialState only inside the launched function, and restart the notebook kernel."
        )
    if _accel_state_initialized():
        raise RuntimeError(
            f"{launcher} was called after PartialState() or Accelerator() was created in this "
            f"process; the workers would inherit its rank and device. Create them only inside the "
            f"launched function, and restart the notebook kernel."
        )
    if start_method == "fork" and torch.cuda.is_initialized():
        raise RuntimeError(
            f"{launcher} was called after CUDA was initialised in this process, and CUDA can't be "
            f"used in forked workers. Keep every CUDA call (model.cuda(), torch.cuda.*) inside "
            f"the launched function, and restart the notebook kernel."
        )


def _start_method() -> str:
    # fork needs no pickling of args and starts in milliseconds; it is the safe default only on
    # Linux (macOS and Windows default to spawn for good reasons).
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return "fork"
    return "spawn"


def _failure_text(failure: Any) -> str:
    message = failure.message
    if isinstance(message, dict):
        text = str(message.get("message", message))
        stack = message.get("extraInfo", {}).get("py_callstack")
        return f"{text}\n{stack}" if stack else text
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"killed by signal {failure.signal_name()} ({message})"
    return f"exit code {failure.exitcode} (see the worker's output above)"


def _elastic_launch(
    launcher: str,
    function: Callable[..., Any],
    args: tuple,
    *,
    num_processes: int,
    num_nodes: int,
    node_rank: int,
    master_addr: str,
    port: str,
    environment: Mapping[str, str],
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> None:
    from accel_base.elastic_agent import ElasticJob, agent_errors, run_elastic_job

    child_failed, _ = agent_errors()
    start_method = _start_method()
    _check_parent_is_clean(launcher, start_method)
    rdzv_configs = dict(rdzv_conf or {})
    if rdzv_backend == "static":
        rdzv_configs["rank"] = node_rank
    job = ElasticJob(
        nproc_per_node=num_processes,
        rdzv_endpoint=rdzv_endpoint or f"{master_addr}:{port}",
        min_nodes=num_nodes,
        max_nodes=num_nodes,
        rdzv_backend=rdzv_backend,
        rdzv_configs=rdzv_configs,
        run_id=rdzv_id,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method=start_method,
        log_line_prefix_template=log_line_prefix_template,
    )
    env = {"MASTER_ADDR": master_addr, "MASTER_PORT": str(port), **environment}
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"  # what torchrun does for several processes per machine
    with _patched_environment(env):
        try:
            run_elastic_job(job, _Entrypoint(function), args)
        except child_failed as exc:
            failed = {rank: _failure_text(f) for rank, f in sorted(exc.failures.items())}
            world = num_processes * num_nodes
            lines = [
                f"{launcher}: rank {rank} of {world} failed: {text}"
                for rank, text in failed.items()
            ]
            raise WorkerProcessError("\n".join(lines), failed) from None


def _validate_mixed_precision(mixed_precision: str) -> str:
    # accel_ops is imported on first call, not with this module (it costs seconds)
    from accel_base.env_values import MIXED_PRECISION_CHOICES

    value = str(mixed_precision).lower()
    if value not in MIXED_PRECISION_CHOICES:
        raise ValueError(
            f"mixed_precision={mixed_precision!r} is not supported; choose one of "
            f"{', '.join(MIXED_PRECISION_CHOICES)}."
        )
    return value


def _validate_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def notebook_launcher(
    function: Callable[..., Any],
    args: tuple = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str = "29500",
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: dict | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> None:
    """Run ``function(*args)`` on ``num_processes`` processes per machine, from a notebook.

    With ``num_processes`` None or 1 on one machine the function runs in this process. Otherwise
    torch's elastic agent starts the workers (forked on Linux, spawned elsewhere) with the launch
    environment set: torchrun's variables, ``ACCEL_MIXED_PRECISION`` and ``ACCEL_NUM_MACHINES``.
    Create the ``Accelerator`` inside ``function``: this process must not have a process group,
    an accel state or (on Linux) an initialised CUDA context, or a RuntimeError says so.

    ``function`` must be defined at the top level of a module or notebook cell (it is pickled by
    reference); a lambda or nested function raises a TypeError. If a worker raises or dies, a
    :class:`WorkerProcessError` (a RuntimeError) names each failed rank with its error.

    ``use_port`` and ``master_addr`` locate the rendezvous of rank 0; for several machines run the
    same call on each with its ``node_rank``. ``rdzv_backend``, ``rdzv_endpoint``, ``rdzv_conf``,
    ``rdzv_id``, ``max_restarts``, ``monitor_interval`` and ``log_line_prefix_template`` are passed
    to the elastic agent's ``LaunchConfig``.

    Example::

        def train(learning_rate):
            accelerator = Accelerator()
            ...

        notebook_launcher(train, args=(3e-4,), num_processes=2, mixed_precision="bf16")
    """
    precision = _validate_mixed_precision(mixed_precision)
    if num_processes is not None:
        _validate_count("num_processes", num_processes)
    _validate_count("num_nodes", num_nodes)
    if (
        isinstance(node_rank, bool)
        or not isinstance(node_rank, int)
        or not 0 <= node_rank < num_nodes
    ):
        raise ValueError(
            f"node_rank must be an int in [0, num_nodes={num_nodes}), got {node_rank!r}"
        )
    environment = {"ACCEL_MIXED_PRECISION": precision, "ACCEL_NUM_MACHINES": str(num_nodes)}
    per_node = num_processes or 1
    if per_node == 1 and num_nodes == 1:
        print("Launching training in this process.")
        with _patched_environment(environment):
            function(*args)
        return
    _check_picklable(function, "notebook_launcher")
    print(f"Launching training on {per_node} processes per machine, {num_nodes} machine(s).")
    _elastic_launch(
        "notebook_launcher",
        function,
        tuple(args),
        num_processes=per_node,
        num_nodes=num_nodes,
        node_rank=node_rank,
        master_addr=master_addr,
        port=str(use_port),
        environment=environment,
        rdzv_backend=rdzv_backend,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_conf=rdzv_conf,
        rdzv_id=rdzv_id,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        log_line_prefix_template=log_line_prefix_template,
    )


def debug_launcher(function: Callable[..., Any], args: tuple = (), num_processes: int = 2) -> None:
    """Run ``function(*args)`` on ``num_processes`` CPU processes, for tests and debugging.

    The workers get ``ACCEL_USE_CPU=1`` and ``ACCEL_MIXED_PRECISION=no`` besides torchrun's
    variables, and rendezvous on a free port of 127.0.0.1 (several debug launches can run side by
    side). The same rules as :func:`notebook_launcher` apply: a top-level function, no process
    group or accel state in this process; a failed worker raises :class:`WorkerProcessError`
    naming its rank.
    """
    from accel_base.ports import get_free_port

    _validate_count("num_processes", num_processes)
    _check_picklable(function, "debug_launcher")
    _elastic_launch(
        "debug_launcher",
        function,
        tuple(args),
        num_processes=num_processes,
        num_nodes=1,
        node_rank=0,
        master_addr="127.0.0.1",
        port=str(get_free_port(host="127.0.0.1")),
        environment={
            "ACCEL_USE_CPU": "1",
            "ACCEL_MIXED_PRECISION": "no",
            "ACCEL_NUM_MACHINES": "1",
        },
    )
