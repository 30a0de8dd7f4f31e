"""``katra3d bisect``: which commit of a git history made a scene slower.

* :mod:`katra3d.harness.bisect.plan`: the checked setup, a new or resumed bisection in its output
  directory;
* :mod:`katra3d.harness.bisect.measure`: one commit's captures in its worktree and its change
  against GOOD;
* :mod:`katra3d.harness.bisect.search`: the bisection loop and its outcome;
* :mod:`katra3d.harness.bisect.state`: the records and ``DIR/bisect.json``;
* :mod:`katra3d.harness.bisect.report`: the text of the result.

The rule that classifies a commit is the library's (:mod:`katra_trace.analysis.bisection`), over the
one decision model's rows.
"""
