"""What the accel packages share across the torch line, defined once.

Standard library only, and no logic beyond definitions and one launcher: the engine-description
types an engine publishes through the ``accel.strategies`` entry-point group and the one reader of
that group (:mod:`accel_base.engine_description`, :mod:`accel_base.config_question`,
:mod:`accel_base.mesh_dimension`), how launch variables spell their values and the mixed-precision
modes (:mod:`accel_base.env_values`), and the free-port probe (:mod:`accel_base.ports`), and the
one elastic launcher both ``accel launch`` and ``notebook_launcher`` start workers with
(:mod:`accel_base.elastic_agent`, which imports torch when it runs, never on import). accel-launch
imports it without importing torch; accel-ops, accel-core and accel-backends re-export its names
from their old module paths.

``import accel_base`` imports none of its submodules.
"""

from __future__ import annotations

__version__ = "0.1.2"
