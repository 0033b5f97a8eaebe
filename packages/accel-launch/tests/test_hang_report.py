"""The hang report's table, from records as accel-ops writes them (the real 2-process runs are
in integration-tests/test_hang_report.py: they need accel-ops in the workers)."""

from __future__ import annotations

from accel_launch.launch.hang_report import format_hang_table, longest_wait


def record(rank: int, state: str, **fields: object) -> dict:
    return {"rank": rank, "pid": 100 + rank, "state": state, "since": 1000.0, **fields}


def test_the_table_names_what_each_rank_waits_in_and_the_idle_culprit():
    records = {
        0: record(0, "waiting", operation="gather", inputs="shape (4) float32", call_site="t.py:9"),
        2: record(2, "running"),
    }
    text = format_hang_table(records, range(4), now=1312.0)
    lines = text.splitlines()
    assert lines[0].split() == ["rank", "where", "for", "inputs", "call", "site"]
    assert lines[1].split() == [
        "0",
        "waiting",
        "in",
        "gather",
        "312",
        "s",
        "shape",
        "(4)",
        "float32",
        "t.py:9",
    ]
    assert lines[2].split()[:2] == ["1", "not"] and "no record" in lines[2]
    assert lines[3].split() == ["2", "not", "in", "any", "collective"]
    assert "ranks 1, 2, 3 in no collective while others wait: usually the culprit" in text
    assert longest_wait(records, now=1312.0) == 312.0


def test_ranks_in_different_collectives_are_pointed_out():
    records = {
        0: record(0, "waiting", operation="gather", call_site="t.py:9"),
        1: record(
            1,
            "failed",
            operation="wait_for_everyone",
            call_site="t.py:7",
            error="wait_for_everyone failed on rank 1 of 2: the collective did not "
            "complete in 5 s. Usually another rank ...",
        ),
    }
    text = format_hang_table(records, range(2), now=1010.0)
    assert "failed in wait_for_everyone: the collective did not complete in 5 s" in text
    assert "in no collective" not in text
    assert "ranks wait in different collectives or call sites" in text
