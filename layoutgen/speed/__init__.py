"""Decode/prefill speed model (issue 18 items 1-2): bytes per memory, heat, fitting.

``model`` holds the terms, ``hardware`` the sourced peak figures, ``heat`` per-layer
expert heat and its loaders, ``cases`` the benchmark records, ``report`` the table.
"""
