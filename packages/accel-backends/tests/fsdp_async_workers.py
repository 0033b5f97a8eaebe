"""Worker functions of test_fsdp_async_save.py: ``save_state(async_save=True)`` under FSDP2 on 2
real processes (gloo on CPU), run by ``accel_testing.run_workers``.

The background write is held at a gate (a ``threading.Event``) in front of the strategy's
``save_checkpoint``, so the test decides when the write may go on: training steps run while it
is held, and the gate opens only after them. Nothing of torch.distributed is replaced: the
gate wraps accel's own ``save_checkpoint`` and timestamps accel's own ``write_and_commit``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from fsdp_workers import new_model, train

#: How long a held write waits for the gate before going on anyway: a broken test fails on its
#: timestamps instead of hanging (it never elapses in a passing run).
GATE_TIMEOUT = 120.0


class HeldWrite:
    """Holds ``accelerator``'s background writes at a gate; records what they did and when.

    Attributes:
        gate: set it to let the held write go on (each ``hold()`` clears it again).
        written: set once ``save_checkpoint`` returned (its files are in the temporary folder,
            the manifest and the rename still to come).
        groups: for each ``save_checkpoint`` call, whether ``writer.group`` was a group of every
            process other than the default group, and the thread it ran on.
        dcp_groups: the same for the group each DCP save was given (sharded state dicts).
        finished: ``time.monotonic()`` when each background ``write_and_commit`` returned.
    """

    def __init__(self, accelerator: Any) -> None:
        from accel_backends.fsdp import dcp
        from accel_core.checkpointing import background

        self.gate = threading.Event()
        self.gate.set()
        self.written = threading.Event()
        self.groups: list[dict[str, Any]] = []
        self.dcp_groups: list[dict[str, Any]] = []
        self.finished: list[float] = []
        strategy = accelerator.strategy.checkpoint_io
        save_checkpoint = strategy.save_checkpoint
        write_and_commit = background.write_and_commit
        save_folder = dcp.save_folder

        def held_save(writer: Any, *args: Any, **kwargs: Any) -> None:
            self.gate.wait(GATE_TIMEOUT)
            self.groups.append(_group_facts(writer.group))
            save_checkpoint(writer, *args, **kwargs)
            self.written.set()

        def timed_write(*args: Any) -> None:
            try:
                write_and_commit(*args)
            finally:
                self.finished.append(time.monotonic())

        def recorded_dcp_save(*args: Any, group: Any = None) -> None:
            self.dcp_groups.append(_group_facts(group))
            save_folder(*args, group=group)

        strategy.save_checkpoint = held_save
        dcp.save_folder = recorded_dcp_save
        background.write_and_commit = timed_write

    def hold(self) -> None:
        """Make the next write wait at the gate."""
        self.gate.clear()
        self.written.clear()


def _group_facts(group: Any) -> dict[str, Any]:
    import torch.distributed as dist

    return {
        "own_group": group is not None and group != dist.group.WORLD,
        "ranks": dist.get_process_group_ranks(group) if group is not None else None,
        "thread": threading.current_thread().name,
    }


def _accelerator(kind: str, project: Path | None = None) -> Any:
    from accel_backends import FSDPStrategy, FullyShardedDataParallelPlugin
    from accel_core import Accelerator, ProjectConfiguration
    from accel_core.strategies import register_strategy

    register_strategy("fsdp", FSDPStrategy)  # installed metadata may predate the entry point
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        state_dict_type="FULL_STATE_DICT" if kind == "full" else "SHARDED_STATE_DICT",
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
    )
    config = None
    if project is not None:
        config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    return Accelerator(fsdp_plugin=plugin, project_config=config)


def _prepared(kind: str, project: Path | None = None, seed: int = 0) -> tuple[Any, Any, Any]:
    accelerator = _accelerator(kind, project)
    model = new_model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def _full_weights(accelerator: Any, model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}


def overlap_and_equality() -> None:
    """Sync and async saves of the same state, the async one held while training goes on; then
    a second pair, the async one copying into the first one's CPU buffers. Writes
    ``results.json`` (rank 0) for the test to check."""
    out, kind = Path(sys.argv[1]), sys.argv[2]
    accelerator, model, optimizer = _prepared(kind)
    held = HeldWrite(accelerator)
    train(accelerator, model, optimizer, range(3))
    accelerator.save_state(out / "sync_1")
    held.hold()
    returned = time.monotonic()
    accelerator.save_state(out / "async_1", async_save=True)
    save_seconds = time.monotonic() - returned
    # Training goes on while the write is held: these steps change every original tensor.
    train(accelerator, model, optimizer, range(3, 5))
    step_end = time.monotonic()
    folder_at_step_end = (out / "async_1").exists()
    held.gate.set()
    # More steps while the write runs: the training loop's collectives on the default group,
    # DCP's on the saver's own group, at the same time.
    train(accelerator, model, optimizer, range(5, 7))
    accelerator.wait_for_checkpoint()
    first_buffers = _local_pointers(accelerator._background_saver.staging)

    accelerator.save_state(out / "sync_2")
    accelerator.save_state(out / "async_2", async_save=True)
    train(accelerator, model, optimizer, range(7, 8))
    accelerator.wait_for_checkpoint()
    second_buffers = _local_pointers(accelerator._background_saver.staging)
    if accelerator.is_main_process:
        results = {
            "step_end_before_write_end": step_end < held.finished[0],
            "folder_at_step_end": folder_at_step_end,
            "save_seconds": save_seconds,
            "groups": held.groups,
            "dcp_groups": held.dcp_groups,
            "buffers": len(first_buffers),
            "buffers_reused": first_buffers == second_buffers,
        }
        (out / "results.json").write_text(json.dumps(results))
    accelerator.wait_for_everyone()
    accelerator.end_training()


def _local_pointers(staging: dict[str, Any] | None) -> list[int]:
    """The data pointers of every tensor the kept CPU copies hold (a DTensor's local shard)."""
    pointers: list[int] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            local = getattr(value, "_local_tensor", value)
            pointers.append(local.data_ptr())
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(staging)
    return pointers


def killed_during_write() -> None:
    """Automatic naming: ``checkpoint_0`` saved synchronously, two steps, then an asynchronous
    ``checkpoint_1`` whose files are written while its manifest and rename are held: every
    process kills itself with SIGKILL there. Writes the weights at ``checkpoint_0`` and after
    the two steps for the resumed run to compare."""
    project, kind = Path(sys.argv[1]), sys.argv[2]
    accelerator, model, optimizer = _prepared(kind, project)
    train(accelerator, model, optimizer, range(3))
    accelerator.save_state()
    at_checkpoint = _full_weights(accelerator, model)
    train(accelerator, model, optimizer, range(3, 5))
    after = _full_weights(accelerator, model)
    if accelerator.is_main_process:
        torch.save({"at_checkpoint": at_checkpoint, "after": after}, project / "weights.pt")
    accelerator.wait_for_everyone()
    strategy = accelerator.strategy.checkpoint_io
    strategy.save_checkpoint = _then_die(strategy.save_checkpoint)
    accelerator.save_state(async_save=True)
    train(accelerator, model, optimizer, range(5, 6))  # the loop goes on meanwhile
    threading.Event().wait(GATE_TIMEOUT)  # the background thread kills the process first
    raise SystemExit("the background write did not kill the process")


def _then_die(save_checkpoint: Any) -> Any:
    """``save_checkpoint``, then SIGKILL: the files are written, the manifest and rename not."""

    def save_then_die(writer: Any, *args: Any, **kwargs: Any) -> None:
        save_checkpoint(writer, *args, **kwargs)
        writer.finish()  # every file written and checksummed: only the commit is left
        (writer.root / f"killed_{writer.rank}").write_text("")
        os.kill(os.getpid(), signal.SIGKILL)

    return save_then_die


def resume_after_kill() -> None:
    """A fresh run (other initial weights) in the killed run's project: ``load_state()`` picks
    the latest complete checkpoint, training continues as the killed run did, and the next
    asynchronous save completes. Writes ``resumed.json`` (rank 0)."""
    project, kind = Path(sys.argv[1]), sys.argv[2]
    accelerator, model, optimizer = _prepared(kind, project, seed=1)
    accelerator.load_state()
    loaded = _full_weights(accelerator, model)
    train(accelerator, model, optimizer, range(3, 5))
    after = _full_weights(accelerator, model)
    folder = accelerator.save_state(async_save=True)
    accelerator.wait_for_checkpoint()
    if accelerator.is_main_process:
        expected = torch.load(project / "weights.pt", weights_only=True)
        results = {
            "loaded": all(torch.equal(loaded[k], v) for k, v in expected["at_checkpoint"].items()),
            "continued": all(torch.equal(after[k], v) for k, v in expected["after"].items()),
            "next_folder": Path(folder).name,
        }
        (project / "resumed.json").write_text(json.dumps(results))
    accelerator.wait_for_everyone()
    accelerator.end_training()
