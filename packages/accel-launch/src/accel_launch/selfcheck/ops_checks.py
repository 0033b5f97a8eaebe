"""The checks of accel-ops: ``PartialState``'s view of the job, then each collective.

Only imported when accel-ops is importable on every rank. Each collective runs on per-rank
tensors whose result is known, moved to ``PartialState().device`` first.
"""

from __future__ import annotations

import torch

from accel_launch.selfcheck.checks import Check, Job, expect_equal


def ops_checks(job: Job) -> list[Check]:
    """accel-ops' state and collectives, each on per-rank tensors whose result is known."""
    import accel_ops

    rank, world = job.rank, job.world

    def on_device(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(accel_ops.PartialState().device)

    def state() -> str:
        st = accel_ops.PartialState()
        expect_equal("PartialState.num_processes", world, st.num_processes)
        expect_equal("PartialState.process_index", rank, st.process_index)
        expect_equal("PartialState.is_main_process", rank == 0, st.is_main_process)
        return f"process {st.process_index} of {st.num_processes} on {st.device}, as expected"

    def gather() -> str:
        mine = {"rank": torch.tensor([rank]), "row": torch.tensor([[rank, 10 * rank + 1]])}
        got = accel_ops.gather({k: on_device(v) for k, v in mine.items()})
        expect_equal("gathered ranks", torch.arange(world), got["rank"])
        rows = torch.tensor([[r, 10 * r + 1] for r in range(world)])
        expect_equal("gathered rows [rank, 10 * rank + 1]", rows, got["row"])
        return f"gathered ranks {got['rank'].tolist()} and rows {got['row'].tolist()}, as expected"

    def broadcast() -> str:
        last = world - 1
        first = on_device(torch.tensor([7.0, 8.0]) if rank == 0 else torch.zeros(2))
        expect_equal(
            "broadcast from process 0", torch.tensor([7.0, 8.0]), accel_ops.broadcast(first)
        )
        from_last = on_device(torch.tensor([100.0 + last]) if rank == last else torch.zeros(1))
        got = accel_ops.broadcast(from_last, from_process=last)
        expect_equal(f"broadcast from process {last}", torch.tensor([100.0 + last]), got)
        return f"[7.0, 8.0] from process 0 and [{100.0 + last}] from process {last} everywhere"

    def reduce() -> str:
        mine = on_device(torch.tensor([rank + 1.0, 2.0 * (rank + 1)]))
        total = world * (world + 1) / 2
        for reduction, expected in (
            ("sum", [total, 2 * total]),
            ("mean", [(world + 1) / 2, world + 1.0]),
            ("max", [float(world), 2.0 * world]),
        ):
            got = accel_ops.reduce(mine, reduction)
            expect_equal(f"reduce({reduction!r}) of [r + 1, 2(r + 1)]", torch.tensor(expected), got)
        return f"sum {total:g}, mean {(world + 1) / 2:g}, max {world} of rank + 1, as expected"

    def pad_across_processes() -> str:
        mine = on_device(torch.full((rank + 1,), rank + 1))
        padded = accel_ops.pad_across_processes(mine, dim=0, pad_index=-1)
        expected = torch.tensor([[r + 1] * (r + 1) + [-1] * (world - r - 1) for r in range(world)])
        got = accel_ops.gather(padded[None])
        expect_equal("rank r's r + 1 values padded with -1 to the longest, gathered", expected, got)
        return f"lengths 1..{world} padded to {world} with -1 and gathered as expected"

    def drop_duplicated_tail() -> str:
        # A sharded evaluation of 2 * world - 1 samples, 2 per process: the loader repeats sample
        # 0 to fill the last process's batch, and the gathered batch has it once too often.
        n = 2 * world - 1
        mine = on_device(torch.tensor([(2 * rank) % n, (2 * rank + 1) % n]))
        got = accel_ops.drop_duplicated_tail(accel_ops.gather(mine), n)
        expect_equal(f"{n} samples gathered, duplicates dropped", torch.arange(n), got)
        return f"{n} samples, 1 repeated to fill the batch, gathered once each in order"

    return [
        ("accel_ops.PartialState", state),
        ("accel_ops.gather", gather),
        ("accel_ops.broadcast", broadcast),
        ("accel_ops.reduce", reduce),
        ("accel_ops.pad_across_processes", pad_across_processes),
        ("accel_ops.drop_duplicated_tail", drop_duplicated_tail),
    ]
