"""Accelerate's ``accelerate.test_utils.scripts.test_script``: the script ``accel test``
launches. ``main()`` is accel-launch's self-check (the process group, each collective, a few
training steps when accel-core is installed; returns the exit code); Accelerate's own check
functions of this script are refused, saying why. Run as a script under ``accel launch``, it runs
the self-check."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_NAMES = {"main": "accel_launch.selfcheck.run:main"}
_UNSUPPORTED = dict.fromkeys(
    (
        "ATOL",
        "RTOL",
        "central_dl_preparation_check",
        "check_seedable_sampler",
        "check_seedable_sampler_in_batch_sampler_shard",
        "check_seedable_sampler_with_data_seed",
        "custom_sampler_check",
        "dl_preparation_check",
        "generate_baseline_dataloader",
        "init_state_check",
        "mock_training",
        "print_last",
        "print_local_main",
        "print_main",
        "print_on",
        "process_execution_check",
        "rng_sync_check",
        "test_reinstantiated_state",
        "test_split_between_processes_dataset",
        "test_split_between_processes_evenly",
        "test_split_between_processes_list",
        "test_split_between_processes_nested_dict",
        "test_split_between_processes_tensor",
        "test_trigger",
        "training_check",
    ),
    ACCELERATE_OWN_CHECKS,
)

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)

if __name__ == "__main__":
    import sys

    from accel_launch.selfcheck.run import main

    raise SystemExit(main(sys.argv[1:]))
