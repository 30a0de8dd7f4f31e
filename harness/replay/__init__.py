"""apitrace traces as scenes: ``katra3d run APP.trace`` replays the trace with the installed
glretrace; :mod:`katra3d.harness.run.replay` turns its frames into a katra3d trace
(docs/replay.md)."""
