"""Capturing: the engine (one frame loop), the scene lifecycle, the timers and clocks, the event
buffer, per-draw zones, instruction counting, the reference draw and stopping. Everything that runs
while frames are measured."""
