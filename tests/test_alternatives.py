"""Alternatives (issue 17 item 5, seed 004): two services that cannot run together,
one of them started at boot.

Seed 004's tower rebooted, both vLLM services started and neither got enough
VRAM.  Declared as alternatives (``conflicts:`` + ``default: true`` on one),
the plan budgets them as never running together (each alone fits, the two do
not), only the default has ``[Install] WantedBy``, both say ``Conflicts=`` on
each other, and switching is ``systemctl start OTHER.service``, which stops
the running one through ``Conflicts=``.
"""

from __future__ import annotations

from pathlib import Path

from test_vllm_plan import CHAT, PROFILE, refused, spec_text

from layoutgen.render.artifacts import render
from layoutgen.render.validate import Validated, validate_file

from realtools import parse_unit, quadlet_dryrun, systemd_verify, unit_values

# each holds 24 requests of 131,072 tokens (48 GiB of KV): one fits a 95 GiB GPU, two not
BIG = CHAT.replace("ctx: 32768", "ctx: 131072").replace(
    "role: worker", "role: worker\n    parallel: 24"
)
GENESIS = BIG.replace("chat:", "genesis:") + "    default: true\n"
AEON = BIG.replace("chat:", "aeon:").replace("port: 8000", "port: 8001") + (
    "    conflicts: [genesis]\n"
)


def validated(tmp_path: Path, services: str) -> Validated:
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(services))
    return validate_file(path, "spec.yaml")


def test_without_conflicts_the_two_do_not_fit(tmp_path: Path) -> None:
    errors = refused(
        tmp_path, GENESIS.replace("    default: true\n", "") + AEON.split("    conflicts")[0]
    )
    assert any("does not fit GPU gpu0" in e for e in errors), errors


def test_the_plan_budgets_alternatives_as_exclusive(tmp_path: Path) -> None:
    v = validated(tmp_path, GENESIS + AEON)
    genesis, aeon = v.plan.service("genesis"), v.plan.service("aeon")
    one = genesis.buffers["CUDA0"].total
    assert aeon.buffers["CUDA0"].total == one
    gpu0 = v.plan.device("gpu0")
    # the device holds the larger of the two, not their sum (they may reuse the same VRAM)
    assert gpu0.used == one
    assert 2 * one > gpu0.capacity - gpu0.reserve
    # each one's start-up check sees the other as never running beside it
    for sp in (genesis, aeon):
        assert sp.budget is not None
        (check,) = sp.budget.start
        assert check.before == () and check.ok


def test_exactly_one_starts_at_boot_and_they_conflict_both_ways(tmp_path: Path) -> None:
    files = render(validated(tmp_path, GENESIS + AEON), "spec.yaml")
    for kind, suffix, target in (
        ("quadlet", "container", "default.target"),
        ("systemd", "service", "multi-user.target"),
    ):
        genesis = parse_unit(files[f"box/{kind}/genesis.{suffix}"])
        aeon = parse_unit(files[f"box/{kind}/aeon.{suffix}"])
        assert unit_values(genesis, "Install", "WantedBy") == [target]
        assert unit_values(aeon, "Install", "WantedBy") == []
        assert unit_values(genesis, "Unit", "Conflicts") == ["aeon.service"]
        assert unit_values(aeon, "Unit", "Conflicts") == ["genesis.service"]
    units = tmp_path / "quadlet"
    units.mkdir()
    for path, text in files.items():
        if path.endswith(".container"):
            (units / Path(path).name).write_text(text)
    result = quadlet_dryrun(units)
    assert result.ok, (result.rc, result.warnings)
    assert unit_values(result.units["genesis.service"], "Install", "WantedBy") == ["default.target"]
    assert unit_values(result.units["aeon.service"], "Install", "WantedBy") == []
    assert "genesis.service" in " ".join(
        unit_values(result.units["aeon.service"], "Unit", "Conflicts")
    )
    plain = tmp_path / "systemd"
    plain.mkdir()
    for path, text in files.items():
        if "/systemd/" in path:
            (plain / Path(path).name).write_text(text)
    rc, stderr = systemd_verify(sorted(plain.glob("*.service")))
    assert rc == 0 and stderr == "", stderr


def test_default_without_conflicts_is_refused(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, GENESIS)
    assert error.endswith(
        "error: services.genesis.default: 'genesis' conflicts with no service, so it has no "
        "alternative to be the default of; list its alternatives under 'conflicts:' or "
        "remove 'default'"
    )


def test_two_defaults_that_conflict_are_refused(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, GENESIS + AEON + "    default: true\n")
    assert (
        "error: services.genesis.default: 'aeon' is the default too, and the two conflict: "
        "only one of them can start at boot; remove one 'default: true'"
    ) in error
