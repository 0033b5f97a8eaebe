"""Start-up cost: ``import accel`` and ``from accel import PartialState`` against Hugging Face
Accelerate's ``import accelerate`` and the floor, ``import torch``. Each import runs in a fresh
interpreter; the figure is the median wall time of the whole ``python -c`` command."""

from __future__ import annotations

from harness import Context, Row, time_command

TITLE = "Import time (fresh interpreter, median wall seconds)"


def run(ctx: Context) -> list[Row]:
    repeats = 3 if ctx.quick else 7
    bare = time_command([ctx.python, "-c", "pass"], repeats)
    torch = time_command([ctx.python, "-c", "import torch"], repeats)
    accel = time_command([ctx.python, "-c", "import accel"], repeats)
    partial = time_command([ctx.python, "-c", "from accel import PartialState"], repeats)
    accelerate = (
        time_command([ctx.hf_python, "-c", "import accelerate"], repeats) if ctx.hf_python else None
    )
    return [
        Row("python -c pass (interpreter start)", "s", bare, None, bare),
        Row(
            "import accel (raw = import torch)",
            "s",
            accel,
            accelerate,
            torch,
            "<= 0.1x Accelerate",
            None if accelerate is None else accel <= 0.1 * accelerate,
        ),
        Row(
            "from accel import PartialState (raw = import torch)",
            "s",
            partial,
            accelerate,
            torch,
            "<= 1.05x import torch",
            partial <= 1.05 * torch,
        ),
    ]
