"""Listening TCP sockets, read from ``/proc/net/tcp`` and ``/proc/net/tcp6`` (proc(5)).

Why the kernel's tables and not ``ss`` or psutil: one read each, no tool or
dependency, and a fake tree under ``root`` is all a test needs.  Only the
network namespace of the process reading them is seen: doctor run inside a
container sees the container's sockets, not the host's.

A line is ``sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout
inode ...``; ``local_address`` is the address as the kernel stores it, printed
as 32-bit words in host byte order (``0100007F`` is 127.0.0.1 on a
little-endian machine), then ``:`` and the port in hex.  ``st`` 0A is LISTEN.
Lines that do not read so are skipped: the kernel writes these files, and a
line it may add in future must not stop doctor.
"""

from __future__ import annotations

import ipaddress
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

#: TCP_LISTEN in include/net/tcp_states.h, as the tables print it
LISTEN = "0A"
#: The most of one table read: ~150 bytes a socket, so some 400,000 sockets.
MAX_READ = 64 << 20
TABLES = (("proc/net/tcp", 4), ("proc/net/tcp6", 6))


@dataclass(frozen=True, order=True)
class Listener:
    port: int
    address: str  # "127.0.0.1", "0.0.0.0", "::", "::1", "::ffff:127.0.0.1"
    inode: int  # the socket's inode: /proc/PID/fd/N links to socket:[inode]

    @property
    def wildcard(self) -> bool:
        """Bound on every interface: reachable from the network."""
        return self.address in ("0.0.0.0", "::")


@dataclass(frozen=True)
class Sockets:
    listeners: tuple[Listener, ...]
    #: tables that could not be read, as host paths with the reason ("" when all were)
    problems: tuple[str, ...] = ()

    def on(self, port: int) -> tuple[Listener, ...]:
        return tuple(s for s in self.listeners if s.port == port)


def read(root: Path = Path("/")) -> Sockets:
    """Every LISTEN socket of both tables, sorted; a missing tcp6 (IPv6 off) is no problem."""
    found: set[Listener] = set()
    problems: list[str] = []
    for rel, family in TABLES:
        path = root / rel
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                problems.append(f"/{rel} is not a regular file")
                continue
            with path.open("rb") as f:
                raw = f.read(MAX_READ + 1)
        except FileNotFoundError:
            if family == 4:
                problems.append(f"/{rel} does not exist")
            continue
        except OSError as exc:
            problems.append(f"cannot read /{rel}: {exc.strerror or exc}")
            continue
        if len(raw) > MAX_READ:
            problems.append(f"/{rel} is larger than {MAX_READ} bytes")
            continue
        found.update(parse(raw.decode("ascii", errors="replace"), family))
    return Sockets(tuple(sorted(found)), tuple(problems))


def parse(text: str, family: int) -> list[Listener]:
    """The LISTEN sockets of one table's text (its header line is skipped)."""
    out: list[Listener] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        addr, colon, port = fields[1].partition(":")
        if not colon:
            continue
        try:
            address = _address(addr, family)
            number = int(port, 16)
            inode = int(fields[9])
        except ValueError:
            continue
        if 0 < number < 65536:
            out.append(Listener(number, address, inode))
    return out


def _address(text: str, family: int) -> str:
    """An address as the tables print it: 32-bit words, each in host byte order."""
    if len(text) != (8 if family == 4 else 32):
        raise ValueError(f"not an IPv{family} address: {text!r}")
    raw = bytes.fromhex(text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)  # a dual-stack socket's IPv4 address
    return str(address)
