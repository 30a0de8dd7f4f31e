"""apitrace traces as scenes: ``katra3d run APP.trace`` replays the trace with the installed
glretrace.

``tool`` finds the replayer and reads a trace file's facts, ``output`` parses what glretrace prints,
``display`` gives a GLX trace an X server of its own, ``replayer`` runs glretrace (timed, counted
under callgrind, or for the last frame's snapshot); the runner's replay strategy
(:mod:`katra3d.harness.run.replay`) turns its frames into a katra3d trace. docs/replay.md says how
and why.
"""
