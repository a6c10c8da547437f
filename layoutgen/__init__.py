"""layoutgen: declarative deployment generator for local LLM inference.

A YAML spec is loaded (with positions), validated into a frozen ``Spec``,
solved into a resident layout and rendered into podman/quadlet/systemd
artifacts.  Stages are pure functions; I/O happens only at the ends.
"""

#: the one place the version is written: pyproject.toml reads it, `layoutgen --version`
#: prints it, and each release is the git tag v<this> (CHANGELOG.md)
__version__ = "0.3.0"
