"""Rendering a solved spec: argv, podman scripts, quadlet and systemd units, out/."""
