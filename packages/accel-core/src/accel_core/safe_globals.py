"""``TORCH_SAFE_GLOBALS``: what ``torch.load(weights_only=True)`` may rebuild besides tensors.

The numpy pieces of RNG states (``random_states_<rank>.pkl``): ``ndarray`` and its
reconstructor, ``dtype`` (and numpy 2's ``UInt32DType``), and ``codecs.encode``. The same list as
Hugging Face Accelerate's; the checkpoint loader and :func:`accel_core.load` allow exactly these.
Importing this module imports numpy.
"""

from __future__ import annotations

from accel_core.checkpointing.safe_load import _numpy_globals

TORCH_SAFE_GLOBALS: list[object] = _numpy_globals()
