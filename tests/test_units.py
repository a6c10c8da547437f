"""Unit content decisions: podman version targeting, start order, readiness."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.inputs.source import parse
from layoutgen.render.artifacts import render
from layoutgen.render.units import HEALTH_WAIT, QUADLET_SINCE, TCP_WAIT, health_wait, tcp_wait
from layoutgen.render.validate import validate_document, validate_file

import specs
from conftest import ROOT, run_cli
from realtools import shellcheck, systemd_argv

FINAL = ROOT / "layouts" / "familiar-final.yaml"


def _with_podman(version: str) -> dict[str, str]:
    text = FINAL.read_text().replace('podman: "5.4"', f'podman: "{version}"')
    assert f'podman: "{version}"' in text
    doc = parse(text, "layouts/familiar-final.yaml", FINAL)
    return render(validate_document(doc), "layouts/familiar-final.yaml")


def _keys(unit: str, section: str) -> list[str]:
    block = unit.split(f"[{section}]\n", 1)[1].split("\n\n", 1)[0]
    return [line.split("=", 1)[0] for line in block.splitlines()]


def test_podman_5_waits_for_healthy_through_notify() -> None:
    unit = _with_podman("5.4")["compute/quadlet/grandpa.container"]
    assert "Notify=healthy" in unit
    assert "ExecStartPost" not in unit


def test_podman_4_9_waits_with_a_readiness_probe_instead() -> None:
    unit = _with_podman("4.9")["compute/quadlet/grandpa.container"]
    assert "Notify=healthy" not in unit
    (probe,) = [line for line in unit.splitlines() if line.startswith("ExecStartPost=")]
    # what systemd runs: the fixed sh program verbatim ($$ is one $, read by sh from
    # the environment, not expanded by systemd), the URL as its positional parameter
    argv = systemd_argv(probe.removeprefix("ExecStartPost="), env={"MAINPID": "1"})
    assert argv == ["/bin/sh", "-c", HEALTH_WAIT, "health-wait", "http://127.0.0.1:8000/health"]


def test_the_waits_pass_shellcheck(tmp_path: Path) -> None:
    (tmp_path / "health-wait.sh").write_text(f"#!/bin/sh\n{HEALTH_WAIT}\n")
    (tmp_path / "tcp-wait.sh").write_text(f"#!/bin/bash\n{TCP_WAIT}\n")
    rc, out = shellcheck(sorted(tmp_path.glob("*.sh")))
    assert rc == 0, out


def test_the_tcp_wait_ends_once_the_port_accepts_or_the_main_process_is_gone() -> None:
    env = {"PATH": os.environ["PATH"], "MAINPID": str(os.getpid())}
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = str(listening.getsockname()[1])
        argv = tcp_wait("127.0.0.1", port)
        assert subprocess.run(argv, env=env, timeout=60).returncode == 0
    # the port now refuses; the "server" exits while the wait polls
    server = subprocess.Popen(["sleep", "2"])
    reaper = threading.Thread(target=server.wait)
    reaper.start()
    env["MAINPID"] = str(server.pid)
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    finally:
        reaper.join()
    assert done.returncode == 1
    assert f"tcp wait: the main process {server.pid} exited before 127.0.0.1:{port}" in done.stderr


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def health_url() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Handler", (_Health,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/health", handler
    finally:
        server.shutdown()
        server.server_close()


def _wait(url: str, mainpid: int) -> subprocess.CompletedProcess[str]:
    argv = [*health_wait(0)[:-1], url]
    env = {"PATH": os.environ["PATH"], "MAINPID": str(mainpid)}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_the_health_wait_ends_when_health_answers_200(
    health_url: tuple[str, type[_Health]],
) -> None:
    url, _ = health_url
    assert _wait(url, os.getpid()).returncode == 0


def test_the_health_wait_fails_once_the_main_process_has_exited(
    health_url: tuple[str, type[_Health]],
) -> None:
    # a server that answers 503 while it loads and dies before it answers 200:
    # the wait ends with it instead of polling on until TimeoutStartSec=
    url, handler = health_url
    handler.status = 503
    server = subprocess.Popen(["sleep", "3"])
    reaper = threading.Thread(target=server.wait)  # as systemd reaps its main process
    reaper.start()
    try:
        done = _wait(url, server.pid)
    finally:
        reaper.join()
    assert done.returncode == 1
    assert "curl: (22) The requested URL returned error: 503" in done.stderr
    assert (
        f"health wait: the main process {server.pid} exited before {url} answered 200"
        in done.stderr
    )


def test_podman_4_4_gets_newer_keys_through_podman_args() -> None:
    # Ulimit= (4.7) and HealthCmd= (4.5) are too new for 4.4, and so is PodmanArgs= (4.5):
    # rendering says which keys need which version, and validate says it first.
    with pytest.raises(
        InvalidInput,
        match=r"podman 4\.4 \(host\.podman\) is too old for quadlet keys this layout "
        r"needs: Secret= needs 4\.5, Ulimit= needs 4\.7, HealthCmd= needs 4\.5, "
        r"HealthInterval= needs 4\.5, "
        r"HealthStartPeriod= needs 4\.5; ",
    ):
        _with_podman("4.4")
    unit = _with_podman("4.5")["compute/quadlet/grandpa.container"]
    keys = _keys(unit, "Container")
    assert "Ulimit" not in keys
    assert "PodmanArgs=--ulimit memlock=-1:-1" in unit
    for key in keys:
        assert QUADLET_SINCE.get(key, (0, 0)) <= (4, 5), key


def test_services_sharing_a_gpu_start_in_the_solvers_order() -> None:
    files = render(validate_file(FINAL, "f.yaml"), "f.yaml")
    grandpa = files["compute/quadlet/grandpa.container"]
    assert "After=network-online.target naughty-worker0.service naughty-worker1.service" in grandpa
    worker = files["compute/quadlet/naughty-worker0.container"]
    assert "After=network-online.target\n" in worker  # first on its GPU
    for text in files.values():
        assert "Restart=always" not in text


def test_user_templates(tmp_path: Path) -> None:
    for src in (ROOT / "templates").iterdir():
        (tmp_path / src.name).write_text(src.read_text())
    (tmp_path / "layout.md.j2").write_text("custom {{ host }}\n")
    out = tmp_path / "out"
    result = run_cli(["render", "--templates", str(tmp_path), "-o", str(out), str(FINAL)])
    assert result.code == 0, result.stderr
    assert (out / "compute" / "layout.md").read_text() == "custom compute\n"
    (tmp_path / "podman.sh.j2").unlink()
    result = run_cli(["render", "--templates", str(tmp_path), "-o", str(out), str(FINAL)])
    assert result.code == 1
    assert "missing template(s) podman.sh.j2" in result.stderr


def test_api_keys_reach_the_server_as_files_never_as_arguments() -> None:
    files = render(validate_file(FINAL, "f.yaml"), "f.yaml")
    unit = files["compute/quadlet/grandpa.container"]
    assert "Secret=grandpa-api-key,type=mount,target=/run/secrets/api-key" in unit
    assert "--api-key-file /run/secrets/api-key" in unit
    script = files["compute/podman/grandpa.sh"]
    assert "--secret grandpa-api-key,type=mount,target=/run/secrets/api-key" in script
    for text in files.values():
        assert "--api-key " not in text  # a key value is never on a command line
    beelink = ROOT / "layouts" / "beelink-cpu-only.yaml"
    native = render(validate_file(beelink, "b.yaml"), "b.yaml")
    service = next(t for p, t in native.items() if p.endswith(".service"))
    assert "EnvironmentFile=/etc/layoutgen/beelink.env" in service


def test_container_services_need_the_hosts_podman_version() -> None:
    text = FINAL.read_text().replace('  podman: "5.4"', "")
    doc = parse(text, "f.yaml", FINAL)
    with pytest.raises(InvalidInput, match=r"host\.podman is not set: write the podman version"):
        validate_document(doc)  # refused before render, as render would refuse it


def test_plain_units_and_scripts_replace_a_leftover_container_as_quadlet_does() -> None:
    """Issue 15 item 6: quadlet's generated command carries --replace; the plain
    systemd unit and the script did not, so a container left by a crash blocked
    the next start."""
    files = render(validate_file(FINAL, "f.yaml"), "f.yaml")
    for path, text in files.items():
        if path.endswith(".service") and "/usr/bin/podman run" in text:
            run = next(line for line in text.splitlines() if line.startswith("ExecStart="))
            assert " --rm --replace --name " in run, path
        if path.endswith(".sh"):
            assert "--replace" in text, path


def test_every_unit_a_rendered_unit_names_is_rendered_beside_it() -> None:
    """Wants=/After=/Conflicts= name only units of the same host's output (or
    systemd's own targets): installing one host's directory resolves every
    dependency."""
    for layout in sorted((ROOT / "layouts").glob("*.yaml")):
        v = validate_file(layout, layout.name)
        files = render(v, layout.name)
        for kind, suffix in (("quadlet", ".container"), ("systemd", ".service")):
            units = {p for p in files if f"/{kind}/" in p}
            names = {p.rsplit("/", 1)[1].removesuffix(suffix) + ".service" for p in units}
            for path in units:
                for line in files[path].splitlines():
                    key, _, value = line.partition("=")
                    if key not in ("Wants", "After", "Conflicts", "Requires"):
                        continue
                    for unit in value.split():
                        if unit.endswith(".target"):
                            continue
                        host_units = names | {
                            p.rsplit("/", 1)[1]
                            for p in files
                            if p.endswith(".service") and "/systemd/" in p
                        }
                        assert unit in host_units, (layout.name, path, unit)


UUID0 = "GPU-5a2c1f3e-8d4b-4c6a-9e7f-0123456789ab"
GPU0 = "{id: gpu0, index: 0, vram: 97247MiB, reserve: 1GiB}"
GPU1 = "{id: gpu1, index: 1, vram: 97247MiB, reserve: 1GiB}"


def _uuid_spec(tmp: Path, **uuids: str) -> Path:
    text = specs.VALID
    for gpu, line in (("gpu0", GPU0), ("gpu1", GPU1)):
        if gpu in uuids:
            assert line in text
            text = text.replace(line, f"{line[:-1]}, uuid: {uuids[gpu]}}}")
    return specs.write(tmp, text)


def test_a_gpu_with_a_uuid_is_passed_to_podman_by_uuid(tmp_path: Path) -> None:
    """Issue 16: a layout follows the card, not its index, when indices change after
    a reboot or a new card; nvidia-ctk's CDI spec names each GPU by UUID too."""
    path = _uuid_spec(tmp_path, gpu0=UUID0)
    files = render(validate_file(path, "spec.yaml"), "spec.yaml")
    units = "\n".join(t for p, t in files.items() if p.endswith((".container", ".service", ".sh")))
    assert f"nvidia.com/gpu={UUID0}" in units
    assert "nvidia.com/gpu=0" not in units
    assert "nvidia.com/gpu=1" in units  # no uuid: by index


@pytest.mark.parametrize("uuid", ['"GPU-5A2C"', '"0"', "GPU-5A2C1F3E-8D4B-4C6A-9E7F-0123456789AB"])
def test_a_malformed_gpu_uuid_is_refused_where_it_is_written(tmp_path: Path, uuid: str) -> None:
    path = _uuid_spec(tmp_path, gpu0=uuid)
    with pytest.raises(InvalidInput, match=r"spec\.yaml:\d+:\d+: .*is not an NVML GPU UUID"):
        validate_file(path, "spec.yaml")


def test_one_uuid_on_two_gpus_is_refused(tmp_path: Path) -> None:
    path = _uuid_spec(tmp_path, gpu0=UUID0, gpu1=UUID0)
    with pytest.raises(InvalidInput, match=r"host\.gpus\[1\]\.uuid: .* is already host\.gpus\[0\]"):
        validate_file(path, "spec.yaml")
