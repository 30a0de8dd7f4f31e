"""apitrace traces as scenes, replayed with glretrace (docs/replay.md)."""
