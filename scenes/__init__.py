"""katra3d's scenes: the Scene API and the built-in workloads."""

from katra_trace.errors import SceneError
from scenes.api import NOMINAL_RATE_HZ, Frame, Param, Scene, SceneSkip, SimpleFrame

__all__ = ["Frame", "NOMINAL_RATE_HZ", "Param", "Scene", "SceneError", "SceneSkip", "SimpleFrame"]
