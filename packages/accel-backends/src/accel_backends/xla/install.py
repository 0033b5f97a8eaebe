"""``install_xla``: Accelerate's helper that pip-installs torch_xla wheels in Google Colab.

accel never installs packages from inside a program; the function says what to run instead.
"""

from __future__ import annotations

from typing import NoReturn

from accel_backends.errors import ENGINE_INSTALL


def install_xla(upgrade: bool = False) -> NoReturn:
    """Raise ``RuntimeError`` with the command that installs torch_xla (nothing is installed).

    ``upgrade`` is accepted for Accelerate's signature. The XLA strategy of accel-backends
    needs torch_xla matching the installed torch.
    """
    raise RuntimeError(
        "accel does not install packages from a running program; install torch_xla for your "
        f"torch version yourself ({ENGINE_INSTALL['torch_xla']}, or the wheel Google Colab's "
        "TPU runtime documents), then restart the interpreter"
    )
