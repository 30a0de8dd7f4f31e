"""The Scene API and the built-in scenes; authors import from :mod:`katra3d`."""
