"""Start the job: one process in place, or several under torch's elastic agent.

torch is imported only when a job with several processes starts: the elastic agent
(``torch.distributed.launcher.api.elastic_launch``, what ``torchrun`` runs) starts, watches and
stops the workers, through :mod:`accel_base.elastic_agent`, the one elastic launcher that
accel-core's ``notebook_launcher`` also uses. ``accel`` has no process manager of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading

from accel_base.elastic_agent import (
    ElasticAgentMissingError,
    ElasticJob,
    agent_errors,
    run_elastic_job,
)
from accel_launch.errors import AccelLaunchError
from accel_launch.launch import faults, hang_report
from accel_launch.launch.resolve import LaunchPlan
from accel_launch.launch.summary import print_failure_summary, root_cause
from accel_launch.launch.worker import LAUNCHER_PID


def worker_command(script: str, script_args: list[str], module: bool, no_python: bool) -> list[str]:
    """The command one process runs (for a single process it is exec'd as is)."""
    if no_python:
        return [script, *script_args]
    if module:
        return [sys.executable, "-m", script, *script_args]
    return [sys.executable, script, *script_args]


def elastic_command(
    script: str, script_args: list[str], module: bool, no_python: bool
) -> list[str]:
    """The command each worker of a multi-process job runs (through the recording bootstrap)."""
    if no_python:
        return [script, *script_args]
    target = ["-m", script] if module else [script]
    return [sys.executable, "-u", "-m", "accel_launch.launch.worker", *target, *script_args]


def run_single(command: list[str], env: dict[str, str]) -> int:
    """Replace this process with the one worker (no launcher process stays behind)."""
    full_env = {**os.environ, **env}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, full_env)
    except OSError as error:
        print(f"accel launch: cannot start {command[0]!r}: {error}", file=sys.stderr)
        return 127
    return 0  # not reached


def run_elastic(
    plan: LaunchPlan,
    port: int,
    script: str,
    script_args: list[str],
    module: bool,
    no_python: bool,
    env: dict[str, str],
    quiet: bool = False,
) -> int:
    """Run the job under torch's elastic agent; returns the exit code for ``accel launch``.

    On a worker failure the agent stops the other workers (it checks every ``monitor_interval``
    seconds); a short summary (rank, machine, exception, last output lines, and the hang table
    when a rank was in a collective) is printed first, torch's own report after it. SIGINT/SIGTERM
    (and the preemption signal) make the agent pass the signal on to every worker and wait up to
    ``--preemption_grace`` seconds: when the workers saved a preemption checkpoint we print where
    and exit with 75 (:data:`~accel_launch.launch.faults.PREEMPTED_EXIT_CODE`), else with 128 +
    the signal number. Restarts form fresh process groups (:mod:`~accel_launch.launch.faults`).
    While the job runs
    a :class:`~accel_launch.launch.hang_report.HangMonitor` prints the hang table once a
    collective has waited ``--hang-report-after`` seconds, and on SIGUSR1.
    """
    os.environ.update(env)
    if quiet:
        os.environ.setdefault("LOGLEVEL", "ERROR")
    try:
        ChildFailedError, SignalException = agent_errors()
    except ElasticAgentMissingError as error:
        raise AccelLaunchError(str(error)) from None

    if quiet:
        import logging

        logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)

    keep_logs = plan["log_dir"] is not None
    log_dir = str(plan["log_dir"]) if keep_logs else tempfile.mkdtemp(prefix="accel_launch_")
    backend = str(plan["rdzv_backend"])
    preemption = faults.handled_signal(str(plan["preemption_signal"]))
    faults.prepare_agent_environment(os.environ, backend)
    # torch < 2.13's LaunchConfig has no shutdown_timeout (its agent waits 30 s) and reads the
    # signals it passes on from TORCHELASTIC_SIGNALS_TO_HANDLE
    handled = faults.signals_to_handle(preemption)
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = handled
    job = ElasticJob(
        nproc_per_node=plan.nproc_per_node,
        rdzv_endpoint=f"{plan['main_process_ip']}:{port}",
        min_nodes=int(plan["min_machines"]),
        max_nodes=int(plan["num_machines"]),
        rdzv_backend=backend,
        rdzv_configs=faults.rendezvous_settings(plan),
        run_id="none",  # torchrun's default; every machine must use the same id
        max_restarts=int(plan["max_restarts"]),
        monitor_interval=float(plan["monitor_interval"]),
        start_method="spawn",
        log_dir=log_dir,
        shutdown_timeout=max(round(float(plan["preemption_grace"])), 1),
        signals_to_handle=handled,
        local_addr=faults.local_address(str(plan["main_process_ip"])),
    )
    entrypoint, *args = elastic_command(script, script_args, module, no_python)
    os.environ[LAUNCHER_PID] = str(os.getpid())
    folder = hang_report.report_folder(log_dir)
    hang_report.export_folder(folder)
    first_rank = int(plan["machine_rank"]) * plan.nproc_per_node
    ranks = range(first_rank, first_rank + plan.nproc_per_node)
    monitor = hang_report.HangMonitor(folder, ranks, float(plan["hang_report_after"]))
    monitor.start()
    # signal handlers can only be set from the main thread (launch_command may run elsewhere)
    in_main_thread = threading.current_thread() is threading.main_thread()
    # SIGUSR1 prints the hang table, unless it is the preemption signal (the agent handles it)
    hang_signal = in_main_thread and preemption != signal.SIGUSR1
    if hang_signal:
        previous = signal.signal(signal.SIGUSR1, lambda *_: monitor.report("SIGUSR1 received"))
    try:
        run_elastic_job(job, entrypoint, args)
    except ChildFailedError as error:
        monitor.stop()
        saved = faults.preempted_line(folder)
        if saved is not None and faults.all_preempted(error.failures):
            print(saved, file=sys.stderr, flush=True)  # the workers were signalled directly
            return faults.PREEMPTED_EXIT_CODE
        table = hang_report.last_records_table(folder, ranks)
        print_failure_summary(error.failures, int(plan["machine_rank"]), log_dir, table)
        print(error.format_msg(), file=sys.stderr)
        code = int(error.failures[root_cause(error.failures)].exitcode)
        if code < 0:
            return 128 - code
        return code if 0 < code < 256 else 1
    except SignalException as error:
        saved = faults.preempted_line(folder)
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        if saved is not None:
            print(f"accel launch: {saved.removeprefix('accel: ')}", file=sys.stderr, flush=True)
            return faults.PREEMPTED_EXIT_CODE
        print(
            f"accel launch: stopped by {error.sigval.name}; all workers were stopped "
            "(no preemption checkpoint was written).",
            file=sys.stderr,
        )
        return 128 + int(error.sigval)
    finally:
        monitor.stop()
        if hang_signal:
            signal.signal(signal.SIGUSR1, previous)
    if not keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)  # kept only when something failed
    return 0
