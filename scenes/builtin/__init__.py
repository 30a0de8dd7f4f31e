"""The built-in scenes. Each module defines one :class:`~scenes.api.Scene` subclass."""
