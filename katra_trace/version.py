"""katra3d's version: the trace header's tool_version and ``--version``."""

__version__ = "0.1.0"
