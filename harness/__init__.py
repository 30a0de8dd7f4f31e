"""katra3d's harness: GL contexts, host probe, timing, the runner and the CLI."""
