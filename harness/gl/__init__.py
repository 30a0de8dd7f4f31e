"""GL at the edge: the backends that open a headless context, the raw-GL shim, the host probe and
the timer check.

Only this package (and the capture engine through :mod:`katra3d.harness.gl.shim`) talks to GL below
moderngl; importing it loads no GL library until a backend is opened.
"""
