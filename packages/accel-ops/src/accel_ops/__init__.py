"""The process state and everything that crosses processes: PartialState, gather, broadcast, reduce, pad_across_processes, send_to_device."""

__version__ = "0.1.0"
