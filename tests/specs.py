"""A small valid spec for tests that need one, as text and as data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"

VALID = f"""\
host:
  name: compute
  cpu: {{cores: 16, threads: 32}}
  ram: 768GiB
  ram_reserve: 32GiB
  podman: "5.4"
  gpus:
    - {{id: gpu0, index: 0, vram: 97247MiB, reserve: 1GiB}}
    - {{id: gpu1, index: 1, vram: 97247MiB, reserve: 1GiB}}
models:
  coder:
    path: /models/Qwen3-Coder-Next-Q4_0.gguf
    profile: {PROFILE}
runtimes:
  ik:
    kind: ik_llama.cpp
    image: registry.home.arpa/ik_llama.cpp:4840
    version: "4840"
services:
  grandpa:
    model: coder
    runtime: ik
    role: orchestrator
    port: 8000
    ctx: 32768
    threads: 15
  worker0:
    model: coder
    runtime: ik
    role: worker
    gpus: [gpu0]
    port: 8001
    ctx: 262144
    cache_type_k: q8_0
"""


def write(tmp: Path, text: str = VALID, name: str = "spec.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path
