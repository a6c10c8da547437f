"""The live host: what `probe` reads and `doctor` compares with a spec.

Nothing here is imported by validate, plan or render (pynvml is loaded only
when a command reads the GPUs).
"""
