"""What the launcher does so that a job survives faults: restarts, preemption, lost machines.

torch's elastic agent does the work (it restarts the worker group, re-runs the rendezvous, passes
signals on); this module only sets it up and reads back what the workers left:

- **Fresh process groups.** With the ``c10d`` rendezvous the workers' store is hosted by the
  group's own rank 0, new every round (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``), instead of the
  agent's store shared by every round, whose keys a restarted group would read. With ``static``
  (one store for the whole run) accel-ops gives each attempt a key space of its own
  (:mod:`accel_ops.group_join`). Either way a group that can't form fails within
  ``--join_timeout`` seconds naming the missing ranks.
- **Preemption.** The agent handles the preemption signal as it handles SIGTERM: it passes it on to
  every worker and waits ``--preemption_grace`` seconds. The workers (accel-core) finish the step,
  save a checkpoint and exit with :data:`PREEMPTED_EXIT_CODE`; the main one leaves
  :data:`MARKER_FILE` in the report folder, from which the launcher prints where the checkpoint is.
- **Lost machines.** ``c10d`` (the default on several machines) re-admits a replacement machine or,
  with ``--num_machines MIN:MAX``, goes on with the machines left; each round's rank 0 of machine 0
  hosts the rendezvous store (``is_host``), so the machine at ``--main_process_ip`` must survive.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping, MutableMapping
from typing import Any

from accel_launch.errors import AccelLaunchError
from accel_launch.launch.resolve import LaunchPlan

#: The exit code of a job stopped by the preemption signal with a complete checkpoint
#: (``EX_TEMPFAIL``, "try again"); the workers (accel-core's ``PREEMPTED_EXIT_CODE``) use it too.
PREEMPTED_EXIT_CODE = 75
#: What the main worker writes into the report folder once the preemption checkpoint is complete.
MARKER_FILE = "preempted.json"
#: torch's agent handles these unless told otherwise (``TORCHELASTIC_SIGNALS_TO_HANDLE``).
_TORCH_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def handled_signal(name: str) -> signal.Signals | None:
    """The preemption signal of a launch (a canonical name from the plan, or ``none``)."""
    return None if name == "none" else signal.Signals[name]


def signals_to_handle(preemption: signal.Signals | None) -> str:
    """The signals torch's agent passes on to the workers (its own four and the preemption's)."""
    handled = list(_TORCH_SIGNALS)
    if preemption is not None and preemption.name not in handled:
        handled.append(preemption.name)
    return ",".join(handled)


def local_address(main_address: str) -> str:
    """This machine's address on the route to ``main_address`` (a UDP ``connect`` sends
    nothing). A c10d round publishes its rank 0's address to the workers as ``MASTER_ADDR``;
    torch would publish the host name, which another machine may not resolve to this one."""
    import socket

    try:
        family = socket.AF_INET6 if ":" in main_address else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((main_address, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return main_address


def prepare_agent_environment(environ: MutableMapping[str, str], backend: str) -> None:
    """With c10d, ask torch's agent for a workers' store per round (hosted by their rank 0)."""
    if backend == "c10d":
        environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")


def _parse_rdzv_conf(text: str | None) -> dict[str, str]:
    settings: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise AccelLaunchError(
                f"--rdzv_conf {text!r}: expected key=value pairs separated by commas, e.g. "
                "last_call_timeout=5,join_timeout=600"
            )
        settings[key.strip()] = value.strip()
    return settings


def rendezvous_settings(plan: LaunchPlan) -> dict[str, Any]:
    """The ``rdzv_configs`` of the agent: ``--rdzv_conf``, and what accel sets beside it."""
    backend = str(plan["rdzv_backend"])
    settings: dict[str, Any] = {"timeout": 900}
    if backend == "static":
        settings["rank"] = int(plan["machine_rank"])
    if backend == "c10d":
        # the machine at --main_process_ip hosts the rendezvous store, on every round
        settings["is_host"] = int(plan["machine_rank"]) == 0
        settings["join_timeout"] = float(plan["join_timeout"])
    settings.update(_parse_rdzv_conf(plan["rdzv_conf"]))
    return settings


def preempted_line(report_folder: str) -> str | None:
    """The line the main worker wrote when its preemption checkpoint was complete, if it did."""
    try:
        with open(os.path.join(report_folder, MARKER_FILE), encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):
        return None
    line = data.get("line") if isinstance(data, dict) else None
    return str(line) if line else None


def all_preempted(failures: Mapping[int, Any]) -> bool:
    """Whether every failed worker exited with :data:`PREEMPTED_EXIT_CODE`."""
    return bool(failures) and all(
        int(failure.exitcode) == PREEMPTED_EXIT_CODE for failure in failures.values()
    )
