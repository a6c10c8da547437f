"""From rendered files to running services (issue 34): ``apply``, ``status``, ``rollback``.

The commands layer: it may import spec, solve, render and live; only the CLI
imports it.  Modules: :mod:`generations` (the state directory: one folder per
applied render, a ``current`` link), :mod:`installer` (which file goes to which
unit directory, installed atomically), :mod:`systemd` (systemctl, journalctl and
the unit's cgroup, for a system or a user manager), :mod:`apply` (the
``nixos-rebuild switch`` sequence and its rollback), :mod:`status` and
:mod:`gitops` (the pull service and timer).
"""
