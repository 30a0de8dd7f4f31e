"""``katra3d bisect``: which commit of a git history made a scene slower. The rule that
classifies a commit is the library's (:mod:`katra_trace.analysis.bisection`)."""
