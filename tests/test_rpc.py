"""rpc devices: spec rules, device order, argv, and the rendered ggml-rpc-server unit.

The facts the plan relies on (rpc devices first in llama.cpp's device list,
buffers named ``RPC0[HOST:PORT]``, ``--rpc`` before ``-ot``) are checked
against the real llama.cpp in tests/test_oracle.py; these tests pin how
layoutgen writes them down and what it refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutgen.render.artifacts import render
from layoutgen.render.validate import FileResult, validate_files
from layoutgen.solve.plan import to_json

from conftest import ROOT
from realtools import parse_exec, parse_unit, systemd_verify, unit_values

PROFILE = ROOT / "layouts" / "models" / "gemma-4-26b-a4b-q5_k_m.yaml"


def spec(
    *,
    endpoint: str = "127.0.0.1:50052",
    served_by: str = "",
    binary: str = "/opt/llama.cpp/bin/ggml-rpc-server",
    runtime: str = "kind: llama.cpp, binary: /opt/llama.cpp/bin/llama-server",
    experts: str = "gpu",
    extra_gpu: str = "",
    gpus: str = "",
) -> str:
    served = f", served_by: {served_by}" if served_by else ""
    return f"""\
host:
  name: tower
  cpu: {{cores: 20, threads: 20}}
  ram: 64GiB
  ram_reserve: 4GiB
  podman: "5.4"
  gpus:
    - {{id: local, index: 0, vram: 16311MiB, reserve: 1088MiB}}
    - id: remote
      vram: 16311MiB
      reserve: 1088MiB
      rpc: {{endpoint: "{endpoint}", binary: {binary}, device: CUDA0{served}}}
{extra_gpu}models:
  gemma: {{path: /srv/models/gemma.gguf, profile: {PROFILE}}}
runtimes:
  rt: {{{runtime}}}
services:
  gemma:
    model: gemma
    runtime: rt
    role: worker
    port: 8080
    ctx: 32768
    experts: {experts}
{gpus}"""


def load(tmp_path: Path, text: str) -> FileResult:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    (result,) = validate_files([(path, "spec.yaml")])
    return result


def messages(result: FileResult) -> list[str]:
    return [d.gcc() for d in result.diagnostics]


def test_rpc_devices_come_first_and_are_named_by_endpoint(tmp_path: Path) -> None:
    """The spec lists the local GPU first; llama.cpp puts rpc devices first."""
    result = load(tmp_path, spec())
    assert result.validated is not None, messages(result)
    plan = json.loads(to_json(result.validated.plan))
    service = plan["services"]["gemma"]
    assert service["buffers"]["RPC0[127.0.0.1:50052]"]["device"] == "remote"
    assert service["buffers"]["CUDA0"]["device"] == "local"
    layers = service["layers"]
    # the layer split runs over [RPC0, CUDA0]: the first layers on the rpc device
    assert min(layers["RPC0[127.0.0.1:50052]"]) == 0
    assert max(layers["CUDA0"]) == max(max(v) for v in layers.values())
    argv = service["argv"]
    assert argv[argv.index("--rpc") + 1] == "127.0.0.1:50052"
    assert argv.index("--rpc") < argv.index("-ngl") < argv.index("-ts")
    # -ts shares in the same order: both cards have the same usable memory
    assert argv[argv.index("-ts") + 1] == "15223,15223"


def test_experts_pinned_to_the_rpc_device_name_its_buffer(tmp_path: Path) -> None:
    result = load(tmp_path, spec(experts="{mode: explicit, layers: {remote: [0, 1], local: [2]}}"))
    assert result.validated is not None, messages(result)
    argv = result.validated.plan.service("gemma").argv
    rules = [argv[i + 1] for i, a in enumerate(argv) if a == "-ot"]
    assert any(r.endswith("=RPC0[127.0.0.1:50052]") for r in rules), rules
    assert argv.index("--rpc") < argv.index("-ot")
    # --cpu-moe follows the rules: the experts not pinned stay on the host
    assert argv.index("-ot") < argv.index("--cpu-moe")


def test_render_writes_the_rpc_server_unit_and_orders_the_client_after_it(
    tmp_path: Path,
) -> None:
    result = load(tmp_path, spec())
    assert result.validated is not None
    files = render(result.validated, "spec.yaml")
    unit = parse_unit(files["tower/systemd/rpc-remote.service"])
    argv = list(parse_exec(unit_values(unit, "Service", "ExecStart")[0])[0].argv)
    assert argv == [
        "/opt/llama.cpp/bin/ggml-rpc-server",
        "-H",
        "127.0.0.1",
        "-p",
        "50052",
        "-d",
        "CUDA0",
    ]
    assert "never expose" in unit_values(unit, "Unit", "Description")[0]
    client = parse_unit(files["tower/systemd/gemma.service"])
    assert "rpc-remote.service" in unit_values(client, "Unit", "After")[0].split()
    assert "rpc-remote.service" in unit_values(client, "Unit", "Wants")[0].split()
    for name, text in files.items():
        (tmp_path / "out" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "out" / name).write_text(text)
    rc, stderr = systemd_verify(sorted((tmp_path / "out").glob("*/systemd/*.service")))
    assert rc == 0 and stderr == "", stderr


def test_a_remote_server_unit_goes_to_the_serving_hosts_folder(tmp_path: Path) -> None:
    result = load(tmp_path, spec(endpoint="10.77.0.2:50052", served_by="tower-b"))
    assert result.validated is not None, messages(result)
    files = render(result.validated, "spec.yaml")
    assert "tower-b/systemd/rpc-remote.service" in files
    assert "tower/systemd/rpc-remote.service" not in files
    client = parse_unit(files["tower/systemd/gemma.service"])
    assert "rpc-remote" not in unit_values(client, "Unit", "After")[0]
    unit = parse_unit(files["tower-b/systemd/rpc-remote.service"])
    argv = list(parse_exec(unit_values(unit, "Service", "ExecStart")[0])[0].argv)
    assert argv[argv.index("-H") + 1] == "10.77.0.2"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"endpoint": "10.77.0.2:50052", "served_by": "tower-b"},
            "warning: host.gpus[1].rpc.endpoint: ggml-rpc-server listens on 10.77.0.2, "
            "beyond this machine",
        ),
        (
            {"endpoint": "127.0.0.1:50052", "served_by": "tower-b"},
            "error: host.gpus[1].rpc.endpoint: 127.0.0.1 on 'tower-b' is not reachable",
        ),
        ({"binary": "ggml-rpc-server"}, "error: host.gpus[1].rpc.binary: 'ggml-rpc-server' is"),
        ({"endpoint": "localhost"}, "is not an endpoint; write HOST:PORT"),
        ({"endpoint": "127.0.0.1:99999"}, "is not an endpoint; write HOST:PORT"),
        (
            {"runtime": "kind: llama.cpp, image: ghcr.io/ggml-org/llama.cpp:server-cuda"},
            "error: services.gemma: 'remote' is an rpc device on the host's loopback",
        ),
        (
            {
                "runtime": "kind: llama.cpp, image: ghcr.io/ggml-org/llama.cpp:server-cuda",
                "gpus": "    gpus: [local, remote]\n",
            },
            "spec.yaml:25:19: error: services.gemma.gpus[1]: 'remote' is an rpc device on the "
            "host's loopback",
        ),
        (
            {"runtime": "kind: ik_llama.cpp, binary: /opt/ik/llama-server"},
            "error: services.gemma: 'remote' is an rpc device; layoutgen plans rpc "
            "devices for llama.cpp runtimes only",
        ),
        (
            {
                "extra_gpu": "    - {id: again, vram: 8GiB, reserve: 0, rpc: {endpoint: "
                '"127.0.0.1:50052", binary: /opt/x, device: CPU}}\n'
            },
            "error: host.gpus[2].rpc.endpoint: 127.0.0.1:50052 is already used by host.gpus[1]",
        ),
        (
            {
                "extra_gpu": "    - {id: both, index: 1, vram: 8GiB, reserve: 0, rpc: {endpoint: "
                '"127.0.0.1:50053", binary: /opt/x, device: CPU}}\n'
            },
            "give exactly one of 'index' (the NVML index of a local GPU) or 'rpc'",
        ),
    ],
    ids=[
        "off-loopback-warns",
        "loopback-of-another-host",
        "relative-binary",
        "no-port",
        "bad-port",
        "container-cannot-reach-loopback",
        "container-listed-gpu-located",
        "ik-not-planned",
        "duplicate-endpoint",
        "index-and-rpc",
    ],
)
def test_rpc_rules(tmp_path: Path, overrides: dict[str, str], expected: str) -> None:
    result = load(tmp_path, spec(**overrides))
    lines = messages(result)
    assert any(expected in line for line in lines), lines
    if expected.startswith("warning"):
        assert result.validated is not None
    else:
        assert result.validated is None


def test_a_private_link_said_in_so_many_words_is_not_warned(tmp_path: Path) -> None:
    """'private_link: true' on a private address: the user has said nothing else can
    reach it (seed-style direct cable); on a public address it is refused."""
    private = spec(endpoint="10.77.0.2:50052", served_by="tower-b, private_link: true")
    result = load(tmp_path, private)
    assert result.validated is not None, messages(result)
    assert not any("beyond this machine" in m for m in messages(result))
    public = spec(endpoint="8.8.8.8:50052", served_by="tower-b, private_link: true")
    said = "\n".join(messages(load(tmp_path, public)))
    assert "error: host.gpus[1].rpc.private_link: 8.8.8.8 is a public address" in said, said
    # without the key the private address still warns (the default stays loud)
    plain = messages(load(tmp_path, spec(endpoint="10.77.0.2:50052", served_by="tower-b")))
    assert any("beyond this machine" in m for m in plain)
