"""Capturing: everything that runs while frames are measured."""
