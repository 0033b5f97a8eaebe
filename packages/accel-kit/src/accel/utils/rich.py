"""Accelerate's ``accelerate.utils.rich``: importing it installs rich's traceback handler (without
local variables), as importing Accelerate's does; without rich installed the import fails with a
``ModuleNotFoundError`` that says to install it, as Accelerate's does."""

import importlib.util

if importlib.util.find_spec("rich") is None:
    raise ModuleNotFoundError(
        "accel.utils.rich installs rich's traceback handler, and rich is not installed: "
        "pip install rich"
    )

from rich.traceback import install

install(show_locals=False)
