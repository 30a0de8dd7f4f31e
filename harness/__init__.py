"""GL contexts, host probe, timing, the runner and the CLI behind :mod:`katra3d`'s public API;
importing it loads no GL module."""
