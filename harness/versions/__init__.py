"""Capturing versions of the user's code: the one capture service of ``ab``, ``bisect`` and ``ci/``.

* :mod:`katra3d.harness.versions.git`: the repository, revisions, the first-parent range, worktrees;
* :mod:`katra3d.harness.versions.command`: one capture command, run in a folder with ``{out}``, in
  its own process group, with the failure tail.
"""
