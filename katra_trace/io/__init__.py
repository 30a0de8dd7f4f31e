"""The trace file: byte layout, writer, reader and output claim."""
