"""No-op job for ``accelerate launch``: create Accelerate's PartialState, then exit."""

from accelerate import PartialState

PartialState()
