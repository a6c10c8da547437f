"""systemd sandboxing for native servers: a dedicated user, a read-only system, few devices.

Why: a container service gets podman's isolation (no new privileges, every
capability dropped, a read-only model mount); a native ``llama-server`` or
``ggml-rpc-server`` would otherwise run as root with the whole host writable
and every device open.  These settings give it what serving a model needs and
nothing else, and the tests score every rendered native unit with
``systemd-analyze security`` (exposure 4.9 "OK" or better).

What a server still needs, and why each exception is there:

- its GPUs: ``DevicePolicy=closed`` with the NVIDIA character-device classes
  as ``/proc/devices`` names them: ``nvidia`` (major 195: ``/dev/nvidiaN`` and
  ``/dev/nvidiactl``; a 2025 driver on an H100 host lists ``195 nvidia`` and
  ``195 nvidiactl``), ``nvidia-frontend`` (the same major under older
  drivers' name), ``nvidia-uvm`` and ``nvidia-caps`` (MIG).  Classes rather
  than ``/dev/nvidiaN`` paths because a node's minor number need not equal
  its NVML index; a class the driver does not have is ignored.  CPU-only
  services get ``PrivateDevices=yes`` instead;
- ``/proc`` as a whole (``ProcSubset`` stays ``all``): llama.cpp reads
  ``/proc/meminfo`` and ``/proc/cpuinfo``, and the CUDA driver
  ``/proc/driver/nvidia``;
- the models: ``ProtectSystem=strict`` and ``ProtectHome=read-only`` leave every
  path readable and none writable, which is what a server needs of its GGUF;
- added capabilities (``SYS_NICE`` ...): granted as ambient capabilities of the
  dynamic user, and then no user namespace (capabilities inside one would not
  reach the host);
- the network: loopback only (``IPAddressDeny=any``) unless the service is
  exposed or talks to an rpc device on another host.
"""

from __future__ import annotations

import ipaddress

NVIDIA_DEVICE_CLASSES = (
    "char-nvidia",
    "char-nvidiactl",
    "char-nvidia-frontend",
    "char-nvidia-uvm",
    "char-nvidia-caps",
)


#: the kernel, cgroups, clock and host name out of reach: every sandboxed unit
_KERNEL: tuple[tuple[str, str], ...] = (
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
)


def hardening(
    *,
    gpu: bool,
    capabilities: tuple[str, ...],
    open_network: bool,
    peers: tuple[str, ...] = (),
    user_manager: bool = False,
) -> list[tuple[str, str]]:
    """``[Service]`` keys for a native server.

    ``open_network``: the server listens beyond loopback or reaches a peer by
    name, so no IP filter; ``peers``: IP addresses it must reach (rpc devices).
    ``user_manager``: a rootless unit (host.deploy.scope user): no ``DynamicUser=``,
    which a user's manager refuses ("DynamicUser= enabled for user unit, which is
    not supported. Refusing."): the server runs as that user.
    """
    caps = " ".join(f"CAP_{c}" for c in capabilities)
    keys: list[tuple[str, str]] = [
        *([] if user_manager else [("DynamicUser", "yes")]),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", caps),
    ]
    if caps:
        keys.append(("AmbientCapabilities", caps))
    else:
        keys.append(("PrivateUsers", "yes"))
    keys += [
        ("ProtectSystem", "strict"),
        ("ProtectHome", "read-only"),
        ("PrivateTmp", "yes"),
        ("UMask", "0077"),
    ]
    if gpu:
        keys.append(("DevicePolicy", "closed"))
        keys += [("DeviceAllow", f"{cls} rw") for cls in NVIDIA_DEVICE_CLASSES]
    else:
        keys.append(("PrivateDevices", "yes"))
    keys += [
        *_KERNEL,
        ("ProtectProc", "invisible"),
        ("RestrictNamespaces", "yes"),
        ("RestrictRealtime", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RemoveIPC", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("SystemCallArchitectures", "native"),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallFilter", "~@privileged"),
        ("SystemCallErrorNumber", "EPERM"),
    ]
    if not open_network:
        keys.append(("IPAddressAllow", " ".join(["localhost", *sorted(set(peers))])))
        keys.append(("IPAddressDeny", "any"))
    return keys


def peer_address(host: str) -> str | None:
    """An rpc endpoint's host as an IP address for ``IPAddressAllow=``, or None for a name."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def scheduler() -> list[tuple[str, str]]:
    """``[Service]`` keys for a schedule's start/stop one-shot: it only asks systemd
    (its manager's socket, ``AF_UNIX``) to start or stop a unit; nothing is written."""
    return [
        (k, v)
        for k, v in updater(writable="", podman=False, restart=True)
        if v or k != "ReadWritePaths"
    ]


def updater(*, writable: str, podman: bool, restart: bool) -> list[tuple[str, str]]:
    """``[Service]`` keys for a LoRA update one-shot: it reads the adapters, writes one
    link (``writable``: its directory), talks to the server on loopback, and may ask
    podman for the API key (``podman``) or systemd for a restart (``restart``).

    Not a dynamic user: the link's directory and the podman secret belong to the
    user the services run as.  Namespaces, capabilities and ``@privileged`` system
    calls stay allowed only when podman runs (rootless podman enters its user
    namespace, and opening its store may mount); systemctl needs only the manager's
    socket (``AF_UNIX``).
    """
    keys: list[tuple[str, str]] = [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "read-only"),
        ("ReadWritePaths", writable),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("UMask", "0077"),
        *_KERNEL,
        ("RestrictRealtime", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("SystemCallArchitectures", "native"),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallErrorNumber", "EPERM"),
        ("IPAddressAllow", "localhost"),
        ("IPAddressDeny", "any"),
    ]
    if not podman:
        keys += [
            ("CapabilityBoundingSet", ""),
            ("RestrictNamespaces", "yes"),
            ("SystemCallFilter", "~@privileged"),
            ("ProtectProc", "invisible"),
        ]
        if not restart:
            keys.append(("RemoveIPC", "yes"))
    return keys
