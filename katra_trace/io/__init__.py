"""The trace file: byte layout, the streaming writer, the reader (whole, block by block, damaged)
and the output claim.
"""
