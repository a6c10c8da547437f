"""apply, status and rollback against real systemd (PID 1 of a podman container).

One machine for the module (machine.py: ~15 s to boot and set up once the
image is imported); the tests run in order, each starting from the host state
the one before left, as a host's history does:

1. a first apply starts two services in the plan's order, each once the one
   before it is healthy (systemd's own timestamps say so), and enables them;
   status reports state, health, bind and VRAM used against planned;
2. a generation whose changed service never becomes healthy is rolled back,
   and the old service answers again; so is a healthy one over its VRAM budget;
3. a switch between ``conflicts`` alternatives stops the running one and waits
   for its GPU memory (held ``release_s`` after exit, as a driver does) before
   starting the other; the same switch by plain ``systemctl start`` OOMs;
4. ``rollback`` returns to the generation before;
5. the quadlet form (podman 5.4's generator inside), ``status SPEC``, the
   missing-secret stop, ``--dry-run``;
6. the git-ops pull: a pushed fast-forward applied by the pull service, a
   force-push refused;
7. rootless units under a lingering user's manager;
8. a failure whose rollback fails too exits 3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.e2e import machine
from tests.fakenvml import build

SPEC = """\
version: 1
host:
  name: e2e
  cpu: {{cores: 2, threads: 2}}
  ram: 64GiB
  ram_reserve: 2GiB
  podman: "5.4"
  targets: [{target}]
  gpus:
    - {{id: gpu0, index: 0, vram: 48GiB, reserve: 512MiB}}
models:
{models}
runtimes:
  llama: {{kind: llama.cpp, {where}, version: "b11434"}}
services:
{services}
"""
NATIVE = "binary: /usr/local/bin/llama-server"
IMAGE = "image: localhost/e2e-server:latest"


def spec(m: machine.Machine, name: str, services: dict[str, str], target: str = "systemd") -> str:
    """Write /srv/specs/NAME.yaml; ``services``: name -> the rest of its line."""
    models = "\n".join(
        f"  {s}: {{path: /srv/models/{s}.gguf, profile: models/gemma-4-26b-a4b-q5_k_m.yaml}}"
        for s in services
    )
    lines = "\n".join(
        f"  {s}: {{role: worker, model: {s}, runtime: llama, gpus: [gpu0], {rest}}}"
        for s, rest in services.items()
    )
    where = NATIVE if target == "systemd" else IMAGE
    text = SPEC.format(target=target, models=models, services=lines, where=where)
    path = f"/srv/specs/{name}.yaml"
    m.write(path, text)
    return path


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[machine.Machine]:
    if shutil.which("podman") is None:
        pytest.fail("the e2e suite needs podman on this machine: make e2e-tools installs it")
    if os.geteuid() != 0:
        pytest.fail("the e2e suite needs root: its host is a privileged podman container")
    lib = build(tmp_path_factory.mktemp("fakenvml"))
    m = machine.boot(tmp_path_factory.mktemp("e2e"), lib, quadlet=True)
    try:
        yield m
    finally:
        if not os.environ.get("LAYOUTGEN_E2E_KEEP"):  # debugging: podman exec NAME bash
            machine.shutdown(m)


def apply(m: machine.Machine, path: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return m.sh(f"layoutgen apply {' '.join(extra)} {path}", timeout=240)


def show(m: machine.Machine, unit: str, prop: str) -> str:
    return m.ok(f"systemctl show --value -p {prop} {unit}").strip()


def health(m: machine.Machine, port: int) -> int:
    out = m.sh(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health").stdout
    return int(out or 0)


def test_first_apply_starts_in_order_gated_on_health(host: machine.Machine) -> None:
    host.model("one", vram_mib=12000, delay=2)
    host.model("two", vram_mib=12000, delay=0)
    path = spec(
        host,
        "chain",
        {"one": "ctx: 4096, port: 8101", "two": "ctx: 4096, port: 8102, after: [one]"},
    )

    done = apply(host, path)

    assert done.returncode == 0, done.stderr
    assert "start (in this order): one, two" in done.stderr
    assert "generation 1 is running" in done.stderr
    # two's process started only after one was active, i.e. after one's
    # ExecStartPost health wait saw 200 (one answers 503 for its first 2 s)
    one_active = int(show(host, "one.service", "ActiveEnterTimestampMonotonic"))
    one_start = int(show(host, "one.service", "ExecMainStartTimestampMonotonic"))
    two_start = int(show(host, "two.service", "ExecMainStartTimestampMonotonic"))
    assert one_active - one_start >= 2_000_000
    assert two_start >= one_active
    status = json.loads(host.ok("layoutgen status --format json"))
    rows = {r["service"]: r for r in status["services"]}
    assert rows["one"]["state"] == "active (running)"
    assert rows["one"]["health"] == "ok"
    assert rows["one"]["bind"] == "127.0.0.1"
    assert rows["one"]["vram_used"] == {"0": 12000 << 20}
    assert 12000 << 20 < rows["one"]["vram_planned"]["0"] < 24 << 30
    assert rows["two"]["generation"] == 1
    # enabled: the host boots into this generation
    assert host.ok("systemctl is-enabled one.service two.service").split() == ["enabled"] * 2
    text = host.ok("layoutgen status")
    assert text.splitlines()[0].split()[:3] == ["SERVICE", "UNIT", "STATE"]
    assert "gpu0:12000/" in text


def test_unhealthy_generation_is_rolled_back(host: machine.Machine) -> None:
    host.model("bad", vram_mib=12000, health="never")
    path = spec(
        host,
        "chain-bad",
        {"one": "ctx: 4096, port: 8101", "two": "ctx: 4096, port: 8102, after: [one]"},
    )
    host.ok(f"sed -i 's|/srv/models/two.gguf|/srv/models/bad.gguf|' {path}")

    done = apply(host, path, "--health-timeout", "6")

    assert done.returncode == 1, done.stderr
    # only two's unit changed (the spec's new name is in no unit's body)
    assert "  ~ two.service" in done.stderr and "~ one.service" not in done.stderr
    assert "error: two: http://127.0.0.1:8102/health did not answer 200 within 6 s" in done.stderr
    assert "  | curl: (22) The requested URL returned error: 503" in done.stderr
    assert "generation 1 is running again; generation 2 failed" in done.stderr
    assert health(host, 8102) == 200  # the old two answers again
    assert health(host, 8101) == 200
    assert "/srv/models/two.gguf" in show(host, "two.service", "ExecStart")
    listed = host.ok("layoutgen rollback --list").splitlines()
    assert listed[0].startswith("*    1") and "applied" in listed[0]
    assert listed[1].startswith("     2") and "failed" in listed[1]


def test_generation_over_its_vram_budget_is_rolled_back(host: machine.Machine) -> None:
    # healthy, but 21,000 MiB against the 20,475 its plan budgets: doctor's check fails it
    host.model("fat", vram_mib=21000)
    path = spec(
        host,
        "chain-fat",
        {"one": "ctx: 4096, port: 8101", "two": "ctx: 4096, port: 8102, after: [one]"},
    )
    host.ok(f"sed -i 's|/srv/models/two.gguf|/srv/models/fat.gguf|' {path}")

    done = apply(host, path)

    assert done.returncode == 1, done.stderr
    assert "two is healthy" in done.stderr
    assert "error: two: uses 21000 MiB on GPU 0, over the 20475 MiB its plan budgets" in done.stderr
    assert "generation 1 is running again" in done.stderr
    assert "/srv/models/two.gguf" in show(host, "two.service", "ExecStart")
    assert health(host, 8102) == 200


def test_a_server_that_dies_while_loading_fails_its_start_at_once(host: machine.Machine) -> None:
    # it answers 503 for 2 s, then exits 1: systemd waits for ExecStartPost= even once
    # the main process is gone, so the health wait itself must stop polling
    host.model("dies", vram_mib=1000, exit_s=2)
    path = spec(host, "dies", {"dies": "ctx: 4096, port: 8105"})

    done = apply(host, path)

    assert done.returncode == 1, done.stderr
    assert "error: dies: " in done.stderr
    assert "generation 1 is running again" in done.stderr
    assert health(host, 8101) == 200 and health(host, 8102) == 200
    # the same unit started by systemd alone (at boot, or by systemctl start): it
    # fails in seconds, not after its TimeoutStartSec=
    gen = next(x for x in done.stderr.splitlines() if x.startswith("generation ") and ": /" in x)
    unit = f"{gen.split(': ', 1)[1]}/files/systemd/dies.service"
    assert int(host.ok(f"sed -n 's/^TimeoutStartSec=\\(.*\\)s$/\\1/p' {unit}")) >= 120
    # the sandbox that hides the server's /proc entry from the wait
    text = host.ok(f"cat {unit}")
    assert all(k in text for k in ("\nDynamicUser=yes", "\nPrivateUsers=yes", "=invisible\n"))
    host.ok(f"cp {unit} /etc/systemd/system/dies.service && systemctl daemon-reload")
    try:
        t0 = time.monotonic()
        started = host.sh("systemctl start dies.service", timeout=90)
        seconds = time.monotonic() - t0
        assert started.returncode != 0
        assert seconds < 20, started.stderr
        print(f"systemctl start of a server that died while loading failed in {seconds:.1f} s")
        log = host.ok("journalctl -o cat -u dies.service")
        assert "fakeserver: CUDA error: an illegal memory access (while loading)" in log
        assert "health wait: the main process " in log
        assert "exited before http://127.0.0.1:8105/health answered 200" in log
        assert show(host, "dies.service", "Result") == "exit-code"
    finally:
        host.ok(
            "systemctl stop dies.service; systemctl reset-failed dies.service; "
            "rm /etc/systemd/system/dies.service; systemctl daemon-reload"
        )


def _alternatives(m: machine.Machine, name: str, chosen: str, target: str = "systemd") -> str:
    """alpha and beta, which never run together: at 256k context each plans 25,642 MiB
    of the 48 GiB card (and holds 25,000), so the two together do not fit."""
    other = "beta" if chosen == "alpha" else "alpha"
    port = {"alpha": 8103, "beta": 8104}
    return spec(
        m,
        name,
        {
            chosen: f"ctx: 262144, port: {port[chosen]}, conflicts: [{other}], default: true",
            other: f"ctx: 262144, port: {port[other]}",
        },
        target,
    )


def test_conflicts_switch_waits_for_vram_release(host: machine.Machine) -> None:
    host.model("alpha", vram_mib=25000, release_s=3)
    host.model("beta", vram_mib=25000, release_s=3)
    first = apply(host, _alternatives(host, "alt-a", "alpha"))
    assert first.returncode == 0, first.stderr
    assert "stop (in this order): two, one" in first.stderr  # they left the layout
    assert health(host, 8103) == 200 and health(host, 8104) == 0

    done = apply(host, _alternatives(host, "alt-b", "beta"))

    assert done.returncode == 0, done.stderr
    assert "stopping alpha.service" in done.stderr
    assert "waiting for the GPU memory of alpha to be released" in done.stderr
    assert health(host, 8104) == 200 and health(host, 8103) == 0
    enabled = host.sh("systemctl is-enabled alpha.service beta.service").stdout.split()
    assert enabled == ["static", "enabled"]  # alpha: no [Install] now
    log = host.ok("journalctl -o cat -u beta.service")
    assert "out of memory" not in log
    # the same switch without the wait: systemd's Conflicts= stops beta and starts
    # alpha at once, while beta's memory is still held; alpha fails as in seed 004
    # (--no-block: the unit's health wait would poll the dead server until its start timeout)
    host.ok("systemctl start --no-block alpha.service")
    oom = host.sh(
        "for i in $(seq 100); do journalctl -o cat -u alpha.service | grep -q 'out of memory' "
        "&& exit 0; sleep 0.2; done; exit 1"
    )
    assert oom.returncode == 0, host.sh("journalctl -o cat -u alpha.service").stdout
    host.ok("systemctl stop alpha.service; systemctl reset-failed alpha.service")
    host.ok("sleep 3.5; systemctl start beta.service")  # as apply left it
    assert health(host, 8104) == 200


def test_rollback_returns_to_the_generation_before(host: machine.Machine) -> None:
    # the host runs alt-b's generation; the one before that ran healthy is alt-a's
    # beta's memory from the test above must be released first
    done = host.sh("layoutgen rollback", timeout=240)

    assert done.returncode == 0, done.stderr
    assert "stopping beta.service" in done.stderr
    assert "waiting for the GPU memory of beta to be released" in done.stderr
    assert health(host, 8103) == 200 and health(host, 8104) == 0
    listed = host.ok("layoutgen rollback --list")
    current = next(line for line in listed.splitlines() if line.startswith("*"))
    assert "/srv/specs/alt-a.yaml" in current


def test_quadlet_form(host: machine.Machine) -> None:
    done = apply(host, _alternatives(host, "q-a", "alpha", "quadlet"))
    assert done.returncode == 0, done.stderr
    assert "  + alpha.container" in done.stderr
    assert health(host, 8103) == 200
    assert show(host, "alpha.service", "FragmentPath") == "/run/systemd/generator/alpha.service"
    assert host.ok("podman ps --format '{{.Names}}'").split() == ["alpha"]

    done = apply(host, _alternatives(host, "q-b", "beta", "quadlet"))

    assert done.returncode == 0, done.stderr
    assert "waiting for the GPU memory of alpha to be released" in done.stderr
    assert health(host, 8104) == 200 and health(host, 8103) == 0
    status = json.loads(host.ok("layoutgen status --format json"))
    rows = {r["service"]: r for r in status["services"]}
    assert rows["beta"]["vram_used"] == {"0": 25000 << 20}
    same = host.sh("layoutgen status /srv/specs/q-b.yaml")
    assert same.returncode == 0, same.stderr
    assert "differs" not in same.stderr
    other = host.sh("layoutgen status /srv/specs/q-a.yaml")
    assert other.returncode == 1  # its alpha starts at boot, and is stopped
    assert "differs from /srv/specs/q-a.yaml as it is now: layoutgen apply it" in other.stderr


def test_missing_secret_stops_apply_with_the_command(host: machine.Machine) -> None:
    path = _alternatives(host, "q-secret", "beta", "quadlet")
    host.ok(f"sed -i 's|port: 8104,|port: 8104, api_key: {{secret: e2e-key}},|' {path}")
    done = apply(host, path)
    assert done.returncode == 1
    assert "printf '%s' \"$API_KEY\" | sudo podman secret create e2e-key -" in done.stderr


def test_dry_run_changes_nothing(host: machine.Machine) -> None:
    before = host.ok("layoutgen rollback --list")
    done = apply(host, "/srv/specs/q-a.yaml", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "apply would:" in done.stderr
    assert "  stop (in this order): beta" in done.stderr
    assert host.ok("layoutgen rollback --list") == before
    assert health(host, 8104) == 200
    # a spec whose GPU is not this host's changes nothing either: it says 96 GiB and
    # plans 51 GiB, more than the 48 GiB NVML reports (less would only warn)
    other = spec(
        host, "other-gpu", {"s1": "ctx: 262144, port: 8401", "s2": "ctx: 262144, port: 8402"}
    )
    host.ok(f"sed -i 's/vram: 48GiB/vram: 96GiB/' {other}")
    refused = apply(host, other)
    assert refused.returncode == 1
    assert "NVML reports 49,152 MiB total, the spec says 98,304 MiB" in refused.stderr
    assert "its GPUs are not this host's; apply changes nothing" in refused.stderr
    assert host.ok("layoutgen rollback --list") == before


GITOPS = """
set -e
git config --global user.email e2e@example.invalid
git config --global user.name e2e
git config --global init.defaultBranch main
mkdir -p /srv/work/layouts
cp -r /srv/specs/models /srv/work/layouts/
cp /srv/specs/g.yaml /srv/work/layouts/g.yaml
cd /srv/work
git init -q && git add . && git commit -qm v1
git clone -q --bare /srv/work /srv/repo.git && git remote add origin /srv/repo.git
"""


def test_gitops_pull_applies_fast_forwards_only(host: machine.Machine) -> None:
    host.model("g1", vram_mib=8000)
    path = spec(host, "g", {"g1": "ctx: 4096, port: 8301"})
    host.ok(
        f"sed -i 's|^  targets:|  gitops: {{repo: /srv/repo.git, branch: main, "
        f"spec: layouts/g.yaml, interval: 1h}}\\n  targets:|' {path}"
    )
    host.ok(GITOPS)
    done = apply(host, "/srv/work/layouts/g.yaml")
    assert done.returncode == 0, done.stderr
    assert "  + layoutgen-pull.service" in done.stderr
    assert "layoutgen-pull.timer enabled" in done.stderr
    assert host.ok("systemctl is-active layoutgen-pull.timer").strip() == "active"
    assert "apply --pull" in show(host, "layoutgen-pull.service", "ExecStart")
    # enabling the timer pulls nothing yet (its first pull is a minute on): a run
    # started now would be joined by the "systemctl start" below, not run after the push
    assert show(host, "layoutgen-pull.service", "ExecMainStartTimestampMonotonic") == "0"
    assert show(host, "layoutgen-pull.timer", "LastTriggerUSecMonotonic") == "0"

    # a pushed fast-forward: the pull service applies it (started by hand, not in 1 min)
    host.ok(
        "cd /srv/work && sed -i 's/ctx: 4096/ctx: 8192/' layouts/g.yaml && "
        "git commit -qam v2 && git push -q origin main"
    )
    v2 = host.ok("git -C /srv/work rev-parse HEAD").strip()
    pulled = host.sh("systemctl start layoutgen-pull.service", timeout=120)
    assert pulled.returncode == 0, host.sh("journalctl -o cat -u layoutgen-pull").stdout
    assert " -c 8192 " in show(host, "g1.service", "ExecStart")
    current = next(x for x in host.ok("layoutgen rollback --list").splitlines() if x[0] == "*")
    assert v2[:12] in current
    assert health(host, 8301) == 200

    # a force-push that rewrites the deployed commit is refused, the host unchanged
    host.ok(
        "cd /srv/work && git reset -q --hard HEAD~1 && sed -i 's/ctx: 4096/ctx: 2048/' "
        "layouts/g.yaml && git commit -qam v3 && git push -qf origin main"
    )
    refused = host.sh("systemctl start layoutgen-pull.service", timeout=120)
    assert refused.returncode != 0
    log = host.ok("journalctl -o cat -u layoutgen-pull")
    assert "which is not a fast-forward of the deployed" in log
    assert " -c 8192 " in show(host, "g1.service", "ExecStart")
    assert health(host, 8301) == 200
    # each start above was a run of its own, none of them the timer's
    assert log.count(f"main moved to {v2[:12]}: applying layouts/g.yaml") == 1
    assert show(host, "layoutgen-pull.timer", "LastTriggerUSecMonotonic") == "0"
    # the timer's first pull (a minute after apply) would race the next tests' applies
    host.ok("systemctl stop layoutgen-pull.timer")


def test_rootless_units_run_under_the_users_manager(host: machine.Machine) -> None:
    host.model("u1", vram_mib=8000)
    path = spec(host, "user", {"u1": "ctx: 4096, port: 8201"})
    host.ok(f"sed -i 's/^  targets:/  deploy: {{scope: user}}\\n  targets:/' {path}")

    done = host.sh(f"cd /tmp && layoutgen apply {path}", timeout=240, user="lg")

    assert done.returncode == 0, done.stderr
    assert "generation 1: /home/lg/.local/state/layoutgen/generations/1" in done.stderr
    lg = "lg"
    unit = host.ok("systemctl --user cat u1.service", user=lg)
    assert "# /home/lg/.config/systemd/user/u1.service" in unit
    assert "DynamicUser" not in unit and "WantedBy=default.target" in unit
    assert host.ok("systemctl --user is-enabled u1.service", user=lg).strip() == "enabled"
    assert health(host, 8201) == 200
    assert host.ok("ps -o user= -C llama-server").split().count("lg") == 1
    status = json.loads(host.ok("layoutgen status --user --format json", user=lg))
    (row,) = status["services"]
    assert (row["service"], row["health"], row["vram_used"]) == ("u1", "ok", {"0": 8000 << 20})
    assert host.sh("layoutgen status").returncode == 0  # the rootful generation, apart


def test_a_rollback_that_fails_too_exits_3(host: machine.Machine) -> None:
    # the new g1 never answers; the old one cannot start again: its model file is gone
    path = spec(host, "broken", {"g1": "ctx: 4096, port: 8301"})
    host.ok(f"sed -i 's|/srv/models/g1.gguf|/srv/models/bad.gguf|' {path}")
    host.ok("mv /srv/models/g1.gguf /srv/models/g1.gone")

    done = apply(host, path, "--health-timeout", "4")

    assert done.returncode == 3, done.stderr
    assert "error: g1: http://127.0.0.1:8301/health did not answer 200 within 4 s" in done.stderr
    assert "error: the rollback failed too: g1: g1.service" in done.stderr
    assert "FileNotFoundError" in done.stderr  # the old server's last log lines
