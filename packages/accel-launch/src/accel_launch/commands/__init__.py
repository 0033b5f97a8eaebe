"""One module per ``accel`` command: ``add_parser(subparsers)`` and ``run(args) -> int``."""
