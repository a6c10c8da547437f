"""The rendered out/ checked by the real tools (DESIGN §9), never skipped.

- podman 5.4's quadlet generator accepts every rendered ``.container``
  (exit 0, no warnings) and the ExecStart it generates runs exactly the
  planned argv after the image;
- ``systemd-analyze verify`` accepts every rendered ``.service`` and every
  unit quadlet generates, with nothing on stderr;
- shellcheck is clean on every ``podman/*.sh``;
- our systemd quoting reads back, through an independent systemd parser,
  as the argv we meant.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutgen.render.quoting import systemd_line
from layoutgen.render.validate import validate_file

from conftest import ROOT
from realtools import (
    quadlet_dryrun,
    shellcheck,
    systemd_argv,
    systemd_security,
    systemd_verify,
)

OUT = ROOT / "out"
LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))
CONTAINERS = sorted(OUT.glob("*/quadlet/*.container"))
SERVICES = sorted(OUT.glob("*/systemd/*.service"))
SCRIPTS = sorted(OUT.glob("*/podman/*.sh"))


def test_out_has_units_of_every_kind() -> None:
    assert CONTAINERS and SERVICES and SCRIPTS


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_quadlet_accepts_units_and_runs_the_planned_argv(layout: Path, tmp_path: Path) -> None:
    v = validate_file(layout)
    host = v.spec.host.name
    units = sorted((OUT / host / "quadlet").glob("*.container"))
    if not units:
        return  # native-binary services only
    for unit in units:
        shutil.copy(unit, tmp_path / unit.name)
    result = quadlet_dryrun(tmp_path)
    assert result.ok, (result.rc, result.warnings)
    generated = tmp_path / "generated"
    generated.mkdir()
    for sp in v.plan.services:
        image = v.spec.runtimes[v.spec.services[sp.name].runtime].image
        if image is None:
            continue
        argv = systemd_argv(result.exec_start(f"{sp.name}.service"))
        assert argv[0].endswith("podman") and argv[1] == "run"
        words = v.spec.runtimes[v.spec.services[sp.name].runtime].rules().ENTRYPOINT_WORDS
        assert argv[argv.index(image) + 1 :] == list(sp.argv[words:])  # vllm serve: 2 words
        (generated / f"{sp.name}.service").write_text(
            result.stdout.split(f"---{sp.name}.service---\n", 1)[1].split("\n---", 1)[0] + "\n"
        )
    rc, stderr = systemd_verify(sorted(generated.glob("*.service")))
    assert rc == 0 and stderr == "", stderr


HOSTS = sorted({p.parent.parent for p in SERVICES})


@pytest.mark.parametrize("host", HOSTS, ids=[p.name for p in HOSTS])
def test_systemd_analyze_verify_accepts_every_rendered_service(host: Path) -> None:
    rc, stderr = systemd_verify(sorted((host / "systemd").glob("*.service")))
    assert rc == 0 and stderr == "", stderr


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_systemd_units_run_the_planned_argv(layout: Path) -> None:
    v = validate_file(layout)
    for sp in v.plan.services:
        runtime = v.spec.runtimes[v.spec.services[sp.name].runtime]
        text = (OUT / v.spec.host.name / "systemd" / f"{sp.name}.service").read_text()
        line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
        argv = systemd_argv(line.removeprefix("ExecStart="))
        if runtime.image is None:
            assert argv == [runtime.binary, *sp.argv[1:]]
        else:
            assert argv[:2] == ["/usr/bin/podman", "run"]
            words = runtime.rules().ENTRYPOINT_WORDS  # the image's entrypoint: vllm serve
            assert argv[argv.index(runtime.image) + 1 :] == list(sp.argv[words:])


def test_shellcheck_is_clean_on_every_script() -> None:
    rc, output = shellcheck(SCRIPTS)
    assert rc == 0, output


WORDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00"),
    min_size=1,
    max_size=16,
).filter(lambda w: w != ";")


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=6))
def test_systemd_quoting_reads_back_as_the_same_argv(argv: list[str]) -> None:
    assert systemd_argv("/bin/x " + systemd_line(argv)) == ["/bin/x", *argv]


def _native_units() -> list[tuple[str, str]]:
    """Every systemd unit of a native server the example layouts render (in memory)."""
    from layoutgen.render.artifacts import render

    units: list[tuple[str, str]] = []
    for layout in LAYOUTS:
        validated = validate_file(layout, f"layouts/{layout.name}")
        for path, text in render(validated, f"layouts/{layout.name}").items():
            if "/systemd/" in path and "ExecStart=/usr/bin/podman" not in text:
                units.append((path, text))
    return units


def _is_update(path: str) -> bool:
    return "-lora-" in path


UPDATES = [(p, t) for p, t in _native_units() if _is_update(p) and p.endswith(".service")]
NATIVE = [(p, t) for p, t in _native_units() if not _is_update(p)]


@pytest.mark.parametrize(("path", "text"), UPDATES, ids=[p for p, _ in UPDATES])
def test_lora_update_units_are_sandboxed(path: str, text: str, tmp_path: Path) -> None:
    """The daily LoRA update runs as the services' user (it writes their adapter link
    and may read their podman secret), loopback only, on a read-only system but for
    the link's directory: systemd's "OK" all the same."""
    unit = tmp_path / Path(path).name
    unit.write_text(text)
    exposure, report = systemd_security(unit)
    assert exposure <= 4.9, report
    assert "IPAddressDeny=any" in text and "ProtectSystem=strict" in text
    assert "ReadWritePaths=" in text and "NoNewPrivileges=yes" in text
    rc, stderr = systemd_verify([unit])
    assert rc == 0 and not stderr, stderr


def test_an_update_with_a_secret_and_a_restart_stays_ok(tmp_path: Path) -> None:
    """The most open update unit: podman reads the API key, systemd restarts the server."""
    from layoutgen.render.artifacts import render

    text = (ROOT / "layouts" / "workstation-vllm-lora-seed000.yaml").read_text()
    text = text.replace('at: "04:00", apply: load}', 'at: "04:00", apply: restart}', 1)
    text = text.replace("    runtime: vllm\n", "    runtime: vllm\n    api_key: {secret: key}\n", 1)
    text = text.replace("profile: models/", f"profile: {ROOT}/layouts/models/")
    assert "apply: restart" in text and "secret: key" in text
    spec = tmp_path / "open.yaml"
    spec.write_text(text)
    files = render(validate_file(spec, "open.yaml"), "open.yaml")
    (service,) = [
        t for p, t in files.items() if "/systemd/" in p and _is_update(p) and p.endswith(".service")
    ]
    assert "CapabilityBoundingSet" not in service  # podman may need its own
    unit = tmp_path / "update.service"
    unit.write_text(service)
    exposure, report = systemd_security(unit)
    assert exposure <= 4.9, report


def test_examples_render_native_units_of_every_kind() -> None:
    # CPU-only, GPU and rpc servers: what the sandbox varies by
    assert any("PrivateDevices=yes" in t for _, t in NATIVE)
    assert any("DevicePolicy=closed" in t for _, t in NATIVE)
    assert any("/rpc-" in p for p, _ in NATIVE)


@pytest.mark.parametrize(("path", "text"), NATIVE, ids=[p for p, _ in NATIVE])
def test_native_units_are_sandboxed(path: str, text: str, tmp_path: Path) -> None:
    """Issue 12: a native server never runs as root with the host open to it."""
    unit = tmp_path / Path(path).name
    unit.write_text(text)
    exposure, report = systemd_security(unit)
    assert exposure <= 4.9, report  # systemd's "OK"
    assert "DynamicUser=yes" in text and "User=root" not in text
    rc, stderr = systemd_verify([unit])
    assert rc == 0 and not stderr, stderr


def test_a_native_unit_with_capabilities_and_exposed_stays_ok(tmp_path: Path) -> None:
    """The most open native unit a spec can ask for still scores "OK"."""
    from layoutgen.render.artifacts import render

    text = (ROOT / "layouts" / "tower-2x5060ti.yaml").read_text()
    text = text.replace(
        "    port: 8080                       # assumed\n",
        "    port: 8080\n    expose: true\n    capabilities: [SYS_NICE, IPC_LOCK, SYS_RESOURCE]\n",
        1,
    )
    text = text.replace("profile: models/", f"profile: {ROOT}/layouts/models/")
    spec = tmp_path / "open.yaml"
    spec.write_text(text)
    validated = validate_file(spec, "open.yaml")
    (service,) = [t for p, t in render(validated, "open.yaml").items() if "/systemd/" in p]
    assert "AmbientCapabilities=CAP_SYS_NICE CAP_IPC_LOCK CAP_SYS_RESOURCE" in service
    assert "IPAddressDeny" not in service  # exposed: no loopback-only filter
    unit = tmp_path / "open.service"
    unit.write_text(service)
    exposure, report = systemd_security(unit)
    assert exposure <= 4.9, report


def _schedule_units(tmp: Path) -> list[tuple[str, str]]:
    from layoutgen.render.artifacts import render

    text = (ROOT / "layouts" / "workstation-gpu-cpu-lanes.yaml").read_text()
    text = text.replace("profile: models/", f"profile: {ROOT}/layouts/models/")
    text = text.replace("    port: 8001 ", '    schedule: "22:00-06:00"\n    port: 8001 ', 1)
    spec = tmp / "scheduled.yaml"
    spec.write_text(text)
    files = render(validate_file(spec, "scheduled.yaml"), "scheduled.yaml")
    return [(p, t) for p, t in files.items() if "/systemd/batch-lane-" in p]


def test_schedule_units_are_sandboxed(tmp_path: Path) -> None:
    """A schedule's start/stop one-shots only ask systemd: "OK" as the LoRA updates."""
    units = _schedule_units(tmp_path)
    assert len(units) == 4
    paths = []
    for path, text in units:
        unit = tmp_path / Path(path).name
        unit.write_text(text)
        paths.append(unit)
        if path.endswith(".service"):
            exposure, report = systemd_security(unit)
            assert exposure <= 4.9, report
            assert "IPAddressDeny=any" in text and "ProtectSystem=strict" in text
            assert "ReadWritePaths=" not in text and "NoNewPrivileges=yes" in text
    rc, stderr = systemd_verify(sorted(paths))
    assert rc == 0 and not stderr, stderr
