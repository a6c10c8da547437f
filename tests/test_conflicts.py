"""``conflicts`` is rendered: systemd keeps conflicting services from running together.

Issue 12: two services that fit only as alternatives, declared ``conflicts``,
were rendered with ``Wants=`` on each other and no ``Conflicts=``, so both
started and raced for the same VRAM.  Now each unit says ``Conflicts=`` on
the other (both ways, whichever side the spec wrote it on), never wants or
waits for it, and one ``After=`` orders the stop of one before the start of
the other.  Read through the real quadlet generator and systemd-analyze.
"""

from __future__ import annotations

from pathlib import Path

from layoutgen.render.artifacts import render
from layoutgen.render.validate import validate_file

from realtools import parse_unit, quadlet_dryrun, systemd_verify, unit_values
from specs import VALID, write

# Two ~50 GiB workers on one 96 GB GPU: they fit only as alternatives (test_solve),
# and a third service on the other GPU that runs beside either.
ALTERNATIVES = (
    VALID.replace("    role: orchestrator\n", "    role: worker\n    gpus: [gpu0]\n")
    .replace("ctx: 32768", "ctx: 262144")
    .replace("    threads: 15\n", "    threads: 15\n    conflicts: [worker0]\n")
    + """\
  worker1:
    model: coder
    runtime: ik
    role: worker
    gpus: [gpu1]
    port: 8002
    ctx: 262144
"""
)


def _files(tmp_path: Path) -> dict[str, str]:
    validated = validate_file(write(tmp_path, ALTERNATIVES), "spec.yaml")
    return render(validated, "spec.yaml")


def _relations(text: str) -> dict[str, set[str]]:
    unit = parse_unit(text)
    return {
        key: {name for value in unit_values(unit, "Unit", key) for name in value.split()}
        for key in ("Wants", "After", "Conflicts")
    }


def test_conflicting_services_conflict_both_ways_and_never_want_each_other(
    tmp_path: Path,
) -> None:
    files = _files(tmp_path)
    for kind, suffix in (("quadlet", "container"), ("systemd", "service")):
        grandpa = _relations(files[f"compute/{kind}/grandpa.{suffix}"])
        worker0 = _relations(files[f"compute/{kind}/worker0.{suffix}"])
        assert grandpa["Conflicts"] == {"worker0.service"}
        assert worker0["Conflicts"] == {"grandpa.service"}
        assert "worker0.service" not in grandpa["Wants"]
        assert "grandpa.service" not in worker0["Wants"]
        # exactly one side is ordered after the other: stop before start, no cycle
        ordered = ("worker0.service" in grandpa["After"]) + ("grandpa.service" in worker0["After"])
        assert ordered == 1


def test_a_service_beside_both_alternatives_conflicts_with_neither(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert _relations(files["compute/systemd/worker1.service"])["Conflicts"] == set()


def test_real_tools_accept_the_conflicting_units(tmp_path: Path) -> None:
    files = _files(tmp_path)
    quadlet_dir = tmp_path / "quadlet"
    quadlet_dir.mkdir()
    services = []
    for path, text in files.items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if path.endswith(".container"):
            (quadlet_dir / target.name).write_text(text)
        elif path.endswith(".service"):
            services.append(target)
    result = quadlet_dryrun(quadlet_dir)
    assert result.ok, result.stderr
    generated = result.units["grandpa.service"]
    assert unit_values(generated, "Unit", "Conflicts") == ["worker0.service"]
    rc, stderr = systemd_verify(services)
    assert rc == 0 and not stderr, stderr


def test_after_naming_a_conflicting_service_is_refused(tmp_path: Path) -> None:
    from conftest import run_cli

    spec = ALTERNATIVES.replace(
        "    conflicts: [worker0]\n", "    conflicts: [worker0]\n    after: [worker0]\n"
    )
    result = run_cli(["validate", str(write(tmp_path, spec))])
    assert result.code == 1
    assert (
        "services.grandpa.after[0]: 'worker0' conflicts with 'grandpa', so 'grandpa' cannot "
        "wait for it to be up; remove it from 'after' or from 'conflicts'"
    ) in result.stdout
