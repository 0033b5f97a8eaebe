"""A tour of what crosses processes, on however many processes it is launched with.

    accel launch --num_processes 2 examples/ops_tour.py

Every rank contributes rank-dependent data; the main process prints what came back.
"""

from __future__ import annotations

import torch

from accel import PartialState
from accel.utils import broadcast, gather, gather_object, pad_across_processes, reduce


def main() -> None:
    state = PartialState()
    rank, world = state.process_index, state.num_processes
    state.print(f"{world} process(es), backend {state.backend}, device {state.device}")

    gathered = gather(torch.tensor([rank, rank * 10]))
    state.print(f"gather of [rank, rank*10]        -> {gathered.tolist()}")

    uneven = torch.arange(rank + 1)  # rank r holds r+1 values
    padded = pad_across_processes(uneven, dim=0, pad_index=-1)
    state.print(f"pad_across_processes + gather    -> {gather(padded).tolist()}")

    summed = reduce(torch.tensor(float(rank + 1)), reduction="sum")
    state.print(f"reduce(sum) of rank+1            -> {summed.item()}")

    announced = broadcast(torch.tensor([rank * 100]), from_process=0)
    state.print(f"broadcast from rank 0            -> {announced.tolist()}")

    objects = gather_object([{"rank": rank, "name": f"worker-{rank}"}])
    state.print(f"gather_object                    -> {objects}")

    with state.split_between_processes(list(range(7)), apply_padding=True) as share:
        mine = share
    state.print(f"split_between_processes(0..6)    -> rank 0 got {mine}")
    state.wait_for_everyone()
    expected = sum(range(1, world + 1))
    if summed.item() != expected:
        raise SystemExit(f"reduce gave {summed.item()}, expected {expected}")


if __name__ == "__main__":
    main()
