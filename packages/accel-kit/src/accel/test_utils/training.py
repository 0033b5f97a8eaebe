"""Accelerate's ``accelerate.test_utils.training``: the regression model and data set (from
accel-testing, ``accel_testing.accelerate.training``; the same seed draws Accelerate's samples).
The GLUE MRPC loaders of Accelerate's own test suite are refused, saying why."""

from accel._lazy import export_table
from accel.test_utils import INSTALL

_NAMES = {
    "RegressionDataset": "accel_testing.accelerate.training",
    "RegressionModel": "accel_testing.accelerate.training",
}

_MRPC = (
    "Accelerate's mocked_dataloaders read GLUE MRPC files of its own test suite with datasets and "
    "transformers; accel ships no such files: build the data loaders in the test"
)
_UNSUPPORTED = {"mocked_dataloaders": _MRPC, "mocked_dataloaders_for_autoregressive_models": _MRPC}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED, install=INSTALL)
