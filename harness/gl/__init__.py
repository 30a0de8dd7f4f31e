"""GL at the edge: backends, the raw-GL shim, the host probe. Importing it loads no GL library
until a backend is opened."""
