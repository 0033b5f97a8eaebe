"""The one way accel starts workers under torch's elastic agent (what ``torchrun`` runs).

Both launchers come here: ``accel launch`` (a command line per worker, with restarts, a
rendezvous across machines, signal relays) and accel-core's ``notebook_launcher`` /
``debug_launcher`` (a Python function per worker). Each describes its job as an
:class:`ElasticJob`; :func:`run_elastic_job` turns it into torch's ``LaunchConfig`` (leaving out
the fields an older torch lacks) and runs the workers. What a failure means stays with each
launcher: torch's ``ChildFailedError`` (and ``SignalException`` when the agent was signalled)
propagate unchanged.

The one module of accel-base that drives something rather than defines it: it lives here because
accel-launch (no torch dependency) and accel-core (not below accel-launch on the map) both need
it. Importing it imports no torch; :func:`run_elastic_job` does, and raises
:class:`ElasticAgentMissingError` when torch is not installed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

#: The rendezvous of fixed ranks: each machine gives its own (``rdzv_configs["rank"]``).
STATIC_RENDEZVOUS = "static"


class ElasticAgentMissingError(ImportError):
    """Several processes were asked for, and torch's elastic agent cannot be imported."""


@dataclass(frozen=True)
class ElasticJob:
    """What a launcher asks of torch's elastic agent (the fields of its ``LaunchConfig``).

    Attributes:
        nproc_per_node: worker processes on this machine.
        rdzv_endpoint: ``host:port`` of the rendezvous (the main machine's).
        min_nodes: machines the job can start with (``max_nodes`` unless elastic).
        max_nodes: machines the job runs on.
        rdzv_backend: ``"static"`` (fixed ranks: ``rdzv_configs["rank"]`` is this machine's) or
            ``"c10d"`` (ranks assigned at each round; what restarts across machines need).
        rdzv_configs: the backend's settings (``rank``, ``join_timeout``, ...).
        run_id: the rendezvous id; every machine of a job must give the same.
        max_restarts: how many times the agent restarts all workers after a failure.
        monitor_interval: seconds between the agent's checks of its workers.
        start_method: ``"spawn"`` or ``"fork"`` (a Python function can be forked).
        log_dir: where torch's log specs keep the workers' output (None: torch's default).
        log_line_prefix_template: the prefix of each worker's output line (``"[${rank}]:"``).
        shutdown_timeout: seconds the agent waits for signalled workers before killing them.
        signals_to_handle: the signals the agent passes on to its workers (``"SIGTERM,..."``).
        local_addr: this machine's address as the c10d rendezvous publishes it.

    The last three are fields of newer torch releases only; where this torch's ``LaunchConfig``
    lacks one, it is left out (the older agent's default applies).
    """

    nproc_per_node: int
    rdzv_endpoint: str
    min_nodes: int = 1
    max_nodes: int = 1
    rdzv_backend: str = STATIC_RENDEZVOUS
    rdzv_configs: Mapping[str, object] = field(default_factory=dict)
    run_id: str = "none"
    max_restarts: int = 0
    monitor_interval: float = 0.1
    start_method: str = "spawn"
    log_dir: str | None = None
    log_line_prefix_template: str | None = None
    shutdown_timeout: int | None = None
    signals_to_handle: str | None = None
    local_addr: str | None = None


#: ``ElasticJob`` fields that only newer torch releases' ``LaunchConfig`` has.
NEWER_FIELDS = ("shutdown_timeout", "signals_to_handle", "local_addr")


def launch_config_fields(job: ElasticJob, known: set[str]) -> dict[str, object]:
    """The keyword arguments of torch's ``LaunchConfig`` for ``job``, given the names of the
    fields this torch's ``LaunchConfig`` has (``known``): the newer fields are left out where
    unknown or unset; ``log_dir`` becomes the ``logs_specs`` :func:`run_elastic_job` builds."""
    values = {
        "min_nodes": job.min_nodes,
        "max_nodes": job.max_nodes,
        "nproc_per_node": job.nproc_per_node,
        "run_id": job.run_id,
        "role": "default",
        "rdzv_endpoint": job.rdzv_endpoint,
        "rdzv_backend": job.rdzv_backend,
        "rdzv_configs": dict(job.rdzv_configs),
        "max_restarts": job.max_restarts,
        "monitor_interval": job.monitor_interval,
        "start_method": job.start_method,
        "log_line_prefix_template": job.log_line_prefix_template,
    }
    for name in NEWER_FIELDS:
        value = getattr(job, name)
        if value is not None and name in known:
            values[name] = value
    return values


def _missing(error: ImportError) -> ElasticAgentMissingError:
    return ElasticAgentMissingError(
        f"launching several processes needs PyTorch's elastic agent ({error}); install torch: "
        "https://pytorch.org/get-started/locally/"
    )


def agent_errors() -> tuple[type[Exception], type[Exception]]:
    """torch's ``ChildFailedError`` (a worker failed) and ``SignalException`` (the agent was
    signalled), for a launcher's ``except`` clauses around :func:`run_elastic_job`; raises
    :class:`ElasticAgentMissingError` when torch is not installed."""
    try:
        from torch.distributed.elastic.multiprocessing import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    except ImportError as error:
        raise _missing(error) from None
    return ChildFailedError, SignalException


def run_elastic_job(
    job: ElasticJob,
    entrypoint: Callable[..., object] | str,
    args: Sequence[object] = (),
) -> None:
    """Run ``entrypoint(*args)`` (a function, or a program and its arguments) in
    ``job.nproc_per_node`` workers under torch's elastic agent; returns when every worker has
    finished. A worker's failure raises torch's ``ChildFailedError``; a signal to the agent its
    ``SignalException`` (after the workers got it)."""
    try:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    except ImportError as error:
        raise _missing(error) from None
    known = {spec.name for spec in dataclasses.fields(LaunchConfig)}
    values = launch_config_fields(job, known)
    if job.log_dir is not None:
        values["logs_specs"] = DefaultLogsSpecs(log_dir=job.log_dir)
    elastic_launch(LaunchConfig(**values), entrypoint)(*args)
