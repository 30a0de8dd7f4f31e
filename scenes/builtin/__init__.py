"""The built-in scenes. Each module defines one :class:`~katra3d.scenes.api.Scene` subclass."""
