"""Prepared loaders across real processes (gloo over loopback): every rank's batches, gathered and
cut to ``GradientState.remainder`` on the last step, give back the dataset exactly, in order.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from accel_testing import run_workers

N = 82
BATCH = 16


class Stream(IterableDataset):
    def __init__(self, n: int, sized: bool = True) -> None:
        self.n, self.sized = n, sized

    def __iter__(self):
        return iter(torch.arange(self.n))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("unsized")
        return self.n


class Corrupt(Dataset):
    """40 samples; reading sample 20 fails."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 20:
            raise KeyError("sample 20 is corrupt")
        return torch.tensor(index)


def _values(batch) -> torch.Tensor:
    return batch[0] if isinstance(batch, (list, tuple)) else batch


def _gathered_epoch(prepared) -> dict:
    """Gather each step's batch from every rank; cut the last step to the remainder."""
    from accel_core import GradientState
    from accel_ops import drop_duplicated_tail, gather

    state = GradientState()
    order, own, ends = [], [], []
    for batch in prepared:
        values = _values(batch)
        own.append(values.tolist())
        gathered = gather(values)
        ends.append(state.end_of_dataloader)
        if state.end_of_dataloader:
            gathered = drop_duplicated_tail(gathered, state.remainder)
        order.extend(gathered.tolist())
    return {"order": order, "own": own, "ends": ends}


def worker():
    from accel_core.data_loader import prepare_data_loader, skip_first_batches
    from accel_ops import PartialState, gather_object

    state = PartialState()
    rank, world = state.process_index, state.num_processes
    light = os.environ.get("LIGHT") == "1"  # the world-size-dependent cases only
    torch.manual_seed(100 + rank)  # every rank's global RNG differs
    out: dict = {}
    table = TensorDataset(torch.arange(N))
    for split in (False, True):
        batch = 12 if split and BATCH % world else BATCH  # split_batches needs a multiple of world
        for name, loader in (
            ("map", DataLoader(table, batch_size=batch)),
            ("stream", DataLoader(Stream(N), batch_size=batch)),
            ("unsized", DataLoader(Stream(N, sized=False), batch_size=batch)),
        ):
            if light and name == "unsized":
                continue
            prepared = prepare_data_loader(loader, split_batches=split)
            out[f"{name}-split{split}"] = _gathered_epoch(prepared)
            dispatched = prepare_data_loader(
                loader,
                split_batches=split,
                put_on_device=True,
                device=state.device,
                dispatch_batches=True,
            )
            out[f"{name}-split{split}-dispatch"] = _gathered_epoch(dispatched)
        # even_batches=False: ranks may hold fewer or shorter batches; gather whole epochs.
        for n in (N, 80):
            prepared = prepare_data_loader(
                DataLoader(TensorDataset(torch.arange(n)), batch_size=batch),
                split_batches=split,
                even_batches=False,
            )
            own = [_values(b).tolist() for b in prepared]
            out[f"uneven{n}-split{split}"] = gather_object([own])

    # Shuffling: the seedable sampler, and a plain shuffle kept in step by rng_types=["generator"].
    shuffled = DataLoader(TensorDataset(torch.arange(64)), batch_size=8, shuffle=True)
    seedable = prepare_data_loader(shuffled, use_seedable_sampler=True, data_seed=11)
    out["seedable"] = [_gathered_epoch(seedable)["order"] for _ in range(2)]

    # Resuming: a dispatched and a sharded loader skip exactly their first batches.
    for name, dispatch in (("shard", False), ("dispatch", True)):
        loader = DataLoader(table, batch_size=BATCH)
        prepared = prepare_data_loader(
            loader, put_on_device=True, device=state.device, dispatch_batches=dispatch
        )
        full = [_values(b).tolist() for b in prepared]
        resumed = [_values(b).tolist() for b in skip_first_batches(prepared, 1)]
        out[f"skip-{name}"] = {"full": full, "resumed": resumed}
    if light:
        _write(out, rank, world)
        return
    out["seedable-again"] = _gathered_epoch(
        prepare_data_loader(shuffled, use_seedable_sampler=True, data_seed=11)
    )["order"]
    synced = prepare_data_loader(shuffled, rng_types=["generator"])
    out["generator-sync"] = [_gathered_epoch(synced)["order"] for _ in range(2)]
    unsynced = prepare_data_loader(
        DataLoader(TensorDataset(torch.arange(64)), batch_size=8, shuffle=True)
    )
    out["no-sync"] = _gathered_epoch(unsynced)["order"]

    # A failure while the main process loads reaches every process instead of hanging them.
    corrupt = prepare_data_loader(
        DataLoader(Corrupt(), batch_size=4),
        put_on_device=True,
        device=state.device,
        dispatch_batches=True,
    )
    try:
        list(corrupt)
        out["failure"] = None
    except Exception as error:
        out["failure"] = f"{type(error).__name__}: {error}"
    _write(out, rank, world)


def _write(out: dict, rank: int, world: int) -> None:
    with open(os.path.join(os.environ["OUT"], f"rank{rank}.json"), "w") as handle:
        json.dump({"world": world, **out}, handle)


def run(tmp_path, nprocs: int, light: bool = False) -> list[dict]:
    env = {"OUT": str(tmp_path), "LIGHT": "1" if light else "0"}
    run_workers(nprocs, function=f"{__file__}::worker", env=env, timeout=240)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nprocs)]


def interleave(per_rank: list[list[list[int]]]) -> list[int]:
    """Step by step, rank by rank: the order in which a global batch lists its samples."""
    order = []
    for step in range(max(len(batches) for batches in per_rank)):
        for batches in per_rank:
            if step < len(batches):
                order.extend(batches[step])
    return order


def check_common(results: list[dict], world: int) -> None:
    first = results[0]
    for key, value in first.items():
        if isinstance(value, dict) and "order" in value:
            assert value["order"] == list(range(N)), key
            assert value["ends"][-1] is True and not any(value["ends"][:-1]), key
            assert all(r[key]["order"] == value["order"] for r in results), key
    for split in (False, True):
        # Dispatching and sharding hand out the same full batches; only the last step differs.
        for name in ("map", "stream"):
            for rank in range(world):
                sharded = results[rank][f"{name}-split{split}"]["own"]
                dispatched = results[rank][f"{name}-split{split}-dispatch"]["own"]
                assert dispatched[:-1] == sharded[:-1], (name, split, rank)
        for n in (N, 80):
            assert interleave(first[f"uneven{n}-split{split}"]) == list(range(n)), (n, split)

    epoch0, epoch1 = first["seedable"]
    assert sorted(epoch0) == sorted(epoch1) == list(range(64))
    assert epoch0 != epoch1

    for rank in range(world):
        for name in ("shard", "dispatch"):
            record = results[rank][f"skip-{name}"]
            assert record["resumed"] == record["full"][1:], (name, rank)

    if "seedable-again" not in first:  # a light run stops here
        return
    assert first["seedable-again"] == epoch0
    for epoch in first["generator-sync"]:
        assert sorted(epoch) == list(range(64))  # same permutation everywhere: no repeats
    assert sorted(first["no-sync"]) != list(range(64))  # different permutations per rank

    assert first["failure"] == "KeyError: 'sample 20 is corrupt'"
    for other in results[1:]:
        assert other["failure"].startswith("RuntimeError: DataLoaderDispatcher: the main process")
        assert "KeyError: 'sample 20 is corrupt'" in other["failure"]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes(tmp_path):
    results = run(tmp_path, 2)
    check_common(results, 2)
    rank0, rank1 = results
    r = lambda a, b: list(range(a, b))  # noqa: E731
    assert rank0["map-splitFalse"]["own"] == [r(0, 16), r(32, 48), r(64, 80)]
    assert rank1["map-splitFalse"]["own"] == [r(16, 32), r(48, 64), [80, 81, *r(0, 14)]]
    assert rank1["unsized-splitTrue"]["own"][-1] == r(6, 14)
    # The dispatcher splits the short last global batch (18 samples) evenly: 9 each.
    assert rank0["map-splitFalse-dispatch"]["own"][-1] == r(64, 73)
    assert rank1["map-splitFalse-dispatch"]["own"][-1] == r(73, 82)
    # even_batches=False with 80 samples: 5 batches, rank 1 gets only two.
    uneven = rank0["uneven80-splitFalse"]
    assert [len(batches) for batches in uneven] == [3, 2]
    assert rank1["skip-dispatch"]["resumed"] == [r(48, 64), r(73, 82)]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_three_processes(tmp_path):
    results = run(tmp_path, 3, light=True)
    check_common(results, 3)
    r = lambda a, b: list(range(a, b))  # noqa: E731
    assert [res["map-splitFalse"]["own"][-1] for res in results] == [
        r(48, 64),
        r(64, 80),
        [80, 81, *r(0, 14)],
    ]
    assert [len(batches) for batches in results[0]["uneven82-splitFalse"]] == [2, 2, 2]
