"""``katra3d bisect``: which commit made a scene slower (rule: katra_trace.analysis.bisection)."""
