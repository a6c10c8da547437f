"""layoutgen: declarative deployment generator for local LLM inference.

A YAML spec is loaded (with positions), validated into a frozen ``Spec``,
solved into a resident layout and rendered into podman/quadlet/systemd
artifacts.  Stages are pure functions; I/O happens only at the ends.
"""

__version__ = "0.1.0"
