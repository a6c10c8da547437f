#!/usr/bin/python3
"""A llama-server stand-in for the end-to-end suite: answers /health, holds fake VRAM.

It reads its behaviour from the "model file" (-m PATH), a JSON object:
  {"vram_mib": 16000, "gpu": 0, "health": "ok" | "never", "delay": 1.5, "release_s": 3,
   "exit_s": 2}
("exit_s": it answers 503 that long, then exits 1 as a server that fails while
loading does.)
At start it reads the fake GPU's state (/run/fakegpu/nvml.json, written by
fakegpu.py) and exits 1 with llama.cpp's out-of-memory line when the GPU has
less free memory than it claims (what a real server does when another still
holds the card: seed 004).  fakegpu.py finds it by its -m argument and lists it
as a GPU process while it runs (and release_s seconds after).  SIGTERM ends it
with status 0, as a server that handles signals does.
"""

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def arg(flag, default=None):
    argv = sys.argv[1:]
    return argv[argv.index(flag) + 1] if flag in argv else default


def event(what):
    """One line in the unit's journal (the tests read them back)."""
    print(f"fakeserver: {what} port={arg('--port')} t={time.time():.3f}", flush=True)


def main():
    if "--version" in sys.argv:
        print("version: 11434 (fake)")
        return 0
    with open(arg("-m")) as f:
        model = json.load(f)
    event("start")
    try:
        with open("/run/fakegpu/nvml.json") as f:
            state = json.load(f)
        gpu = state["gpus"][model.get("gpu", 0)]
        me = f"{os.readlink('/proc/self/ns/pid')}/{os.getpid()}"
        mine = [p for p, who in state.get("owners", {}).items() if who == me]
        # not "free", which stops at 0 once this server is counted beside another
        free = (
            gpu["total"]
            - gpu["used"]
            + sum(p["used"] for p in gpu["processes"] if str(p["pid"]) in mine)
        )
        if free < model["vram_mib"] << 20:
            print(
                f"ggml_backend_cuda_buffer_type_alloc_buffer: allocating {model['vram_mib']} MiB "
                f"on device 0: cudaMalloc failed: out of memory ({free >> 20} MiB free)",
                file=sys.stderr,
                flush=True,
            )
            event("oom")
            return 1
    except (OSError, ValueError, IndexError, KeyError) as exc:
        print(f"fakeserver: no fake GPU state: {exc}", file=sys.stderr)
    ready_at = time.monotonic() + float(model.get("delay", 0))
    healthy = model.get("health", "ok") == "ok" and "exit_s" not in model

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            ok = healthy and time.monotonic() >= ready_at and self.path == "/health"
            body = b'{"status":"ok"}' if ok else b'{"error":"loading model"}'
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer((arg("--host", "127.0.0.1"), int(arg("--port"))), Handler)

    def stop(*_):
        event("stop")
        threading.Thread(target=server.shutdown).start()

    def crash():
        print("fakeserver: CUDA error: an illegal memory access (while loading)", flush=True)
        event("crash")
        os._exit(1)

    if "exit_s" in model:
        threading.Timer(float(model["exit_s"]), crash).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"main: server is listening on http://{arg('--host')}:{arg('--port')}", flush=True)
    server.serve_forever()
    return 0


sys.exit(main())
