"""Runtimes: everything one runtime decides, as dated rules chosen by version."""
