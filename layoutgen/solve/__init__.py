"""Solving: where every tensor, cache and buffer of every service lives."""
