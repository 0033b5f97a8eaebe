"""Hugging Face Accelerate's testing helpers (``accelerate.test_utils``) for accel's environment.

``accel.test_utils`` re-exports them, so a downstream test suite written against Accelerate's
helpers runs on accel (also under the ``accelerate`` alias): ``require_*`` decorators that ask
this machine and this torch, launch commands that run ``accel launch``, a subprocess runner, the
regression model and data set.

- :mod:`accel_testing.accelerate.testing`: devices, markers, ``require_*``, test-case classes,
  subprocess helpers (Accelerate's ``test_utils.testing``);
- :mod:`accel_testing.accelerate.training`: ``RegressionDataset``, ``RegressionModel``
  (Accelerate's ``test_utils.training``).
"""
