"""katra3d's version, the one definition: the trace header's tool_version, katra3d --version."""

__version__ = "0.1.0"
