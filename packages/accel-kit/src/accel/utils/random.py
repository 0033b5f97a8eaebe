"""``accelerate.utils.random``: seeding and RNG synchronisation (accel-core)."""

from accel._lazy import export_table

_NAMES = {
    "set_seed": "accel_core",
    "synchronize_rng_state": "accel_core",
    "synchronize_rng_states": "accel_core",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
