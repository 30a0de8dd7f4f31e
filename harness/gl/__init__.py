"""GL at the edge: backends, raw-GL shim, host probe; no GL library loads until one is opened."""
