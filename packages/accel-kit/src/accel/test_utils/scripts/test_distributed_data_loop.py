"""Accelerate's ``accelerate.test_utils.scripts.test_distributed_data_loop``:
a check of Accelerate itself; its
functions are refused, saying why (see ``accel.test_utils.scripts``)."""

from accel._lazy import export_table
from accel.test_utils.scripts import ACCELERATE_OWN_CHECKS

_UNSUPPORTED = dict.fromkeys(
    (
        "BATCH_SIZE",
        "DummyDataset",
        "DummyIterableDataset",
        "NUM_ELEMENTS",
        "NUM_WORKERS",
        "create_accelerator",
        "create_dataloader",
        "main",
        "test_can_disable_even_batches",
        "test_can_join_uneven_inputs",
        "test_data_loader",
        "test_default_ensures_even_batch_sizes",
        "test_join_can_override_even_batches",
        "test_join_can_override_for_mixed_type_dataloaders",
        "test_join_raises_warning_for_iterable_when_overriding_even_batches",
        "test_join_raises_warning_for_non_ddp_distributed",
        "test_pickle_accelerator",
        "test_stateful_dataloader",
        "test_stateful_dataloader_save_state",
        "verify_dataloader_batch_sizes",
    ),
    ACCELERATE_OWN_CHECKS,
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
