"""The elastic launcher both ``accel launch`` and ``notebook_launcher`` use: the ``LaunchConfig``
fields a job becomes, and the error without torch. (It runs workers for real in accel-launch's
and accel-core's launcher tests.)"""

from __future__ import annotations

import importlib.util

import pytest

from accel_base.elastic_agent import (
    NEWER_FIELDS,
    ElasticAgentMissingError,
    ElasticJob,
    agent_errors,
    launch_config_fields,
    run_elastic_job,
)

OLDER_TORCH = {
    "min_nodes",
    "max_nodes",
    "nproc_per_node",
    "run_id",
    "role",
    "rdzv_endpoint",
    "rdzv_backend",
    "rdzv_configs",
    "max_restarts",
    "monitor_interval",
    "start_method",
    "log_line_prefix_template",
    "logs_specs",
}


def _job() -> ElasticJob:
    return ElasticJob(
        nproc_per_node=4,
        rdzv_endpoint="10.0.0.1:29500",
        min_nodes=1,
        max_nodes=2,
        rdzv_backend="c10d",
        rdzv_configs={"join_timeout": 60},
        max_restarts=3,
        shutdown_timeout=30,
        signals_to_handle="SIGTERM,SIGUSR1",
        local_addr="10.0.0.2",
    )


def test_a_job_becomes_launch_config_fields():
    values = launch_config_fields(_job(), OLDER_TORCH | set(NEWER_FIELDS))
    assert values == {
        "min_nodes": 1,
        "max_nodes": 2,
        "nproc_per_node": 4,
        "run_id": "none",
        "role": "default",
        "rdzv_endpoint": "10.0.0.1:29500",
        "rdzv_backend": "c10d",
        "rdzv_configs": {"join_timeout": 60},
        "max_restarts": 3,
        "monitor_interval": 0.1,
        "start_method": "spawn",
        "log_line_prefix_template": None,
        "shutdown_timeout": 30,
        "signals_to_handle": "SIGTERM,SIGUSR1",
        "local_addr": "10.0.0.2",
    }


def test_fields_an_older_torch_lacks_are_left_out():
    values = launch_config_fields(_job(), OLDER_TORCH)
    assert not set(NEWER_FIELDS) & set(values)
    assert values["max_restarts"] == 3


def test_unset_newer_fields_are_left_to_torch():
    job = ElasticJob(nproc_per_node=2, rdzv_endpoint="127.0.0.1:29500")
    assert not set(NEWER_FIELDS) & set(launch_config_fields(job, OLDER_TORCH | set(NEWER_FIELDS)))


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_without_torch_the_error_says_what_to_install():  # runs in the tests-accel-base session
    job = ElasticJob(nproc_per_node=2, rdzv_endpoint="127.0.0.1:29500")
    for call in (agent_errors, lambda: run_elastic_job(job, "true")):
        with pytest.raises(ElasticAgentMissingError, match=r"elastic agent.*install torch"):
            call()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_with_torch_the_errors_are_torchs_classes():
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    assert agent_errors() == (ChildFailedError, SignalException)
