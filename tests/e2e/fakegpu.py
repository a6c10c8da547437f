#!/usr/bin/python3
"""The fake NVIDIA driver of the end-to-end suite: writes the file the fake
libnvidia-ml.so.1 (tests/fakenvml) answers from, listing each running
fakeserver.py as a process on its GPU with the memory its model file claims.

It scans /proc every 0.1 s; a process is a GPU user when its argv has ``-m PATH``
and PATH (read through /proc/PID/root, so a server inside a nested container is
found too) is a JSON model file with ``vram_mib``.  Its PID is the one this
PID namespace sees, as NVML reports host PIDs.  When a process ends, its memory
stays listed ``release_s`` seconds more, as a driver tears a context down.

Usage: fakegpu.py STATE.json  (STATE holds {"gpus": [{name, uuid, total}]})
"""

import json
import os
import sys
import time

OUT = "/run/fakegpu/nvml.json"


def claims(owners):
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"-m" not in argv or not any(
                a.endswith(b"llama-server") or a.endswith(b"fakeserver.py") for a in argv[:2]
            ):
                continue
            path = argv[argv.index(b"-m") + 1].decode()
            with open(f"/proc/{pid}/root{path}") as f:
                model = json.load(f)
            ns = os.readlink(f"/proc/{pid}/ns/pid")
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            inner = status.split("NSpid:")[1].split("\n")[0].split()[-1]
            owners[int(pid)] = f"{ns}/{inner}"
            found[int(pid)] = (
                int(model.get("gpu", 0)),
                int(model["vram_mib"]) << 20,
                float(model.get("release_s", 0)),
            )
        except (OSError, ValueError, IndexError, KeyError):
            continue
    return found


def main():
    with open(sys.argv[1]) as f:
        base = json.load(f)
    held = {}  # pid -> (gpu, bytes, release_s, gone_at or None)
    last = None
    while True:
        now = time.monotonic()
        owners = {}
        live = claims(owners)
        for pid, (gpu, used, release) in live.items():
            held[pid] = (gpu, used, release, None)
        for pid, (gpu, used, release, gone) in list(held.items()):
            if pid in live:
                continue
            if gone is None:
                held[pid] = (gpu, used, release, now)
            elif now - gone >= release:
                del held[pid]
        gpus = []
        for i, g in enumerate(base["gpus"]):
            procs = [
                {"pid": p, "used": u, "kind": "compute"}
                for p, (gi, u, _r, _g) in sorted(held.items())
                if gi == i
            ]
            used = sum(p["used"] for p in procs) + (300 << 20)
            gpus.append({**g, "used": used, "free": max(g["total"] - used, 0), "processes": procs})
        # who is who, for a server's own start check: "pid:[ns inode]/pid in its namespace"
        who = {str(p): owners.get(p, "") for p in held}
        doc = {"owners": who, "driver_version": "570.86.15", "cuda_version": 12080, "gpus": gpus}
        text = json.dumps(doc, indent=1)
        if text != last:
            tmp = OUT + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, OUT)
            last = text
        time.sleep(0.1)


main()
