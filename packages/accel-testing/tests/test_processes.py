import pytest

from accel_testing import WorkersFailed, run_workers


def report_rank():
    import os

    print(os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"])


def fail_on_rank_one():
    import os
    import sys

    if os.environ["RANK"] == "1":
        sys.exit("rank one gives up")


def test_each_worker_sees_its_rank_and_a_shared_port():
    results = run_workers(3, function=f"{__file__}::report_rank")
    lines = [r.stdout.split() for r in results]
    assert [line[:2] for line in lines] == [["0", "3"], ["1", "3"], ["2", "3"]]
    assert len({line[2] for line in lines}) == 1


def test_a_failing_rank_is_reported_with_its_output():
    with pytest.raises(WorkersFailed) as info:
        run_workers(2, function=f"{__file__}::fail_on_rank_one")
    assert [r.returncode for r in info.value.results] == [0, 1]
    assert "rank one gives up" in str(info.value)


def test_a_hanging_worker_is_killed_at_the_timeout(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(WorkersFailed, match="timed out after 2s"):
        run_workers(2, script=script, timeout=2)
