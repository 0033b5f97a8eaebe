"""DeepSpeed, FSDP and XLA strategies for accel-core.

Not built yet: this release is an installable skeleton. It registers no strategy, so choosing
``deepspeed``, ``fsdp`` or ``xla`` in accel-core fails with an error that names the known
strategies. Nothing here pretends to work.
"""

__version__ = "0.1.1"

#: Strategies this package registers in the ``accel.strategies`` entry-point group (none yet).
PROVIDED_STRATEGIES: tuple[str, ...] = ()
