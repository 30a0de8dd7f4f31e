"""katra3d's scenes (``katra3d.scenes``): the Scene API and the built-in workloads.

Scene authors import the API from :mod:`katra3d` (``from katra3d import Scene, Param``).
"""
