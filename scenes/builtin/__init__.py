"""The built-in scenes, one Scene subclass a module."""
