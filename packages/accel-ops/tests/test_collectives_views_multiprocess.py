"""Real processes on gloo: every collective with views, non-contiguous tensors and tensors that
require grad, plus the shape exchange and ``verify_operation`` across ranks.

One worker, run once on 2 processes, prints one ``REPORT <json>`` line; the test asserts every
rank's values. (test_reliability_multiprocess.py covers gather, reduce, pad and broadcast of
parameters and transposed views; this file covers the remaining collectives and view kinds:
slices with a storage offset, expanded tensors, and non-leaf tensors.)
"""

import json

import pytest

from accel_testing import run_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def views_worker():
    import torch

    import accel_ops as ao

    state = ao.PartialState()
    rank = state.process_index
    out = {}

    base = torch.arange(12.0).reshape(4, 3) + 100 * rank
    tail = base[1:]  # a contiguous view with a storage offset
    column = base[:, 1]  # non-contiguous (stride 3)
    expanded = torch.tensor([float(rank)]).expand(3)  # stride 0
    leaf = torch.nn.Parameter(torch.full((2, 2), float(rank + 1)))
    non_leaf = leaf * 3  # requires grad, has a grad_fn

    out["gather_tail"] = ao.gather(tail).tolist()
    out["gather_column"] = ao.gather(column).tolist()
    out["gather_expanded"] = ao.gather(expanded).tolist()
    gathered = ao.gather(non_leaf[:, 0])
    out["gather_non_leaf"] = [gathered.tolist(), gathered.requires_grad]

    reduced = ao.reduce(column, "sum")
    out["reduce_column"] = [reduced.tolist(), column.tolist()]
    out["reduce_expanded"] = ao.reduce(expanded, "max").tolist()
    reduced = ao.reduce(non_leaf.t(), "mean")
    out["reduce_non_leaf"] = [reduced.tolist(), reduced.requires_grad, non_leaf.tolist()]

    padded = ao.pad_across_processes(base[: rank + 1].t(), dim=1, pad_index=-1)
    out["pad_transposed"] = padded.tolist()
    padded = ao.pad_across_processes(non_leaf[: rank + 1], dim=0)
    out["pad_non_leaf"] = [list(padded.shape), padded.requires_grad]
    padded = ao.pad_across_processes(column[: rank + 2], pad_first=True)
    out["pad_column_first"] = padded.tolist()

    buffer = torch.zeros(3, 4)
    window = buffer[1:, 1:3]  # non-contiguous window into a bigger buffer
    window.copy_(torch.full((2, 2), float(rank + 5)))
    ao.broadcast(window, from_process=1)
    out["broadcast_window"] = buffer.tolist()  # only the window changed, to rank 1's values

    objects = ao.gather_object([leaf.detach()[0], {"rank": rank, "view": column[:2]}])
    out["gather_object"] = [
        objects[0].tolist(),
        objects[1]["rank"],
        objects[1]["view"].tolist(),
        objects[3]["view"].tolist(),
        len(objects),
    ]
    got = ao.gather_object([non_leaf[0]])
    out["gather_object_non_leaf"] = [[t.tolist() for t in got], [t.requires_grad for t in got]]

    payload = [leaf if rank == 0 else None, column[1:] if rank == 0 else None]
    received = ao.broadcast_object_list(payload, from_process=0)
    out["broadcast_object_list"] = [
        received[0].tolist(),
        received[0].requires_grad,
        received[1].tolist(),
    ]

    out["concatenate_views"] = ao.concatenate([column, tail[:, 0]]).tolist()
    out["concatenate_nested"] = ao.concatenate([{"a": [column[:1]]}, {"a": [tail[0, :1]]}])["a"][
        0
    ].tolist()

    copied = ao.copy_tensor_to_devices(column[1:] if rank == 1 else None)
    out["copy_tensor_to_devices"] = copied.tolist()
    shape, code = ao.gather_tensor_shape(base[:, :0] if rank == 1 else None)
    out["gather_tensor_shape"] = [shape.tolist(), code]

    @ao.verify_operation
    def mine(tensor):
        return ao.gather(tensor)

    state.debug = True
    out["verify_same"] = mine(torch.ones(2)).tolist()
    try:
        mine(torch.ones(rank + 1))
        out["verify_mismatch"] = "no error"
    except ao.DistributedOperationException as error:
        out["verify_mismatch"] = str(error)
    state.debug = False
    print("REPORT " + json.dumps(out), flush=True)


def _reports(results):
    reports = []
    for result in results:
        lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
        assert lines, f"rank {result.rank} printed no report:\n{result.stdout}\n{result.stderr}"
        reports.append(json.loads(lines[-1][len("REPORT ") :]))
    return reports


@pytest.fixture(scope="module")
def reports():
    return _reports(run_workers(2, function=f"{__file__}::views_worker", timeout=180))


def _base(rank):
    return [[100.0 * rank + 3 * row + col for col in range(3)] for row in range(4)]


def test_gather_of_views(reports):
    for report in reports:
        assert report["gather_tail"] == _base(0)[1:] + _base(1)[1:]
        assert report["gather_column"] == [1.0, 4.0, 7.0, 10.0, 101.0, 104.0, 107.0, 110.0]
        assert report["gather_expanded"] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
        # non_leaf = 3 * (rank + 1); the result is data, detached from autograd
        assert report["gather_non_leaf"] == [[3.0, 3.0, 6.0, 6.0], False]


def test_reduce_of_views(reports):
    for rank, report in enumerate(reports):
        column = [row[1] for row in _base(rank)]
        assert report["reduce_column"] == [[102.0, 108.0, 114.0, 120.0], column]
        assert report["reduce_expanded"] == [1.0, 1.0, 1.0]
        mean = [[4.5, 4.5], [4.5, 4.5]]  # (3 + 6) / 2
        assert report["reduce_non_leaf"] == [mean, True, [[3.0 * (rank + 1)] * 2] * 2]


def test_pad_of_views(reports):
    for rank, report in enumerate(reports):
        rows = _base(rank)[: rank + 1]
        transposed = [[row[col] for row in rows] for col in range(3)]
        assert report["pad_transposed"] == [line + [-1.0] * (1 - rank) for line in transposed]
        assert report["pad_non_leaf"] == [[2, 2], True]
        column = [row[1] for row in _base(rank)][: rank + 2]
        assert report["pad_column_first"] == [0.0] * (1 - rank) + column


def test_broadcast_into_a_window_of_a_buffer(reports):
    for report in reports:
        assert report["broadcast_window"] == [
            [0.0, 0.0, 0.0, 0.0],
            [0.0, 6.0, 6.0, 0.0],
            [0.0, 6.0, 6.0, 0.0],
        ]


def test_object_collectives_with_views_and_grad(reports):
    for report in reports:
        assert report["gather_object"] == [[1.0, 1.0], 0, [1.0, 4.0], [101.0, 104.0], 4]
        # a non-leaf tensor travels by pickle: every rank gets a copy that requires grad
        assert report["gather_object_non_leaf"] == [[[3.0, 3.0], [6.0, 6.0]], [True, True]]
        assert report["broadcast_object_list"] == [[[1.0, 1.0], [1.0, 1.0]], True, [4.0, 7.0, 10.0]]


def test_concatenate_and_copy_of_views(reports):
    for rank, report in enumerate(reports):
        column = [row[1] for row in _base(rank)]
        tail_first = [row[0] for row in _base(rank)[1:]]
        assert report["concatenate_views"] == column + tail_first
        assert report["concatenate_nested"] == [column[0], _base(rank)[1][0]]
        assert report["copy_tensor_to_devices"] == [104.0, 107.0, 110.0]
        assert report["gather_tensor_shape"] == [[4, 0], 1]


def test_verify_operation_across_ranks(reports):
    for report in reports:
        assert report["verify_same"] == [1.0, 1.0, 1.0, 1.0]
        message = report["verify_mismatch"]
        assert "the ranks passed different shapes or dtypes" in message
        assert "rank 0: shape (1) float32" in message and "rank 1: shape (2) float32" in message
