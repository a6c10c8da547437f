"""Calibrating: buffer sizes from a runtime's start-up log, written into the spec."""
