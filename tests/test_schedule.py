"""schedule: windows checked where they are written, rendered as start/stop timers."""

from __future__ import annotations

from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.render.artifacts import render
from layoutgen.render.schedule import edges
from layoutgen.render.validate import validate_file

from conftest import ROOT
from realtools import systemd_security, systemd_verify

LAYOUTS = ROOT / "layouts"
LANES = (LAYOUTS / "workstation-gpu-cpu-lanes.yaml").read_text()


def _spec(tmp: Path, schedule: str) -> Path:
    text = LANES.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    text = text.replace("    port: 8001 ", f"    schedule: {schedule}\n    port: 8001 ")
    path = tmp / "lanes.yaml"
    path.write_text(text)
    return path


def _files(tmp: Path, schedule: str = '"22:00-06:00"') -> dict[str, str]:
    path = _spec(tmp, schedule)
    return render(validate_file(path, "layouts/lanes.yaml"), "layouts/lanes.yaml")


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ('"25:00-06:00"', "'25:00-06:00' is not a window; write HH:MM-HH:MM, e.g. 22:00-06:00"),
        ('"22:00-22:00"', "'22:00-22:00' is empty or ends after 24:00"),
        ('"22:00"', "'22:00' is not a window"),
        ('"22:00-06:00,"', "'' is not a window"),
    ],
)
def test_invalid_windows_are_located(tmp_path: Path, written: str, message: str) -> None:
    path = _spec(tmp_path, written)
    with pytest.raises(InvalidInput) as exc:
        validate_file(path)
    (d,) = exc.value.diagnostics
    line = path.read_text().splitlines().index(f"    schedule: {written}") + 1
    assert (d.line, d.col) == (line, 15)
    assert message in d.message and "services.batch-lane.schedule" in d.message


def test_edges_are_each_window_start_and_end() -> None:
    assert edges("22:00-06:00, 12:00-24:00") == (["22:00", "12:00"], ["06:00", "00:00"])


def test_a_scheduled_service_renders_timers_and_is_not_started_at_boot(tmp_path: Path) -> None:
    files = _files(tmp_path)
    host = "workstation"
    for target in ("quadlet", "systemd"):
        for action, at in (("start", "22:00"), ("stop", "06:00")):
            timer = files[f"{host}/{target}/batch-lane-{action}.timer"]
            assert f"OnCalendar=*-*-* {at}:00\n" in timer
            # start and stop would both catch up at boot, in no set order
            assert "Persistent=" not in timer
            assert f"Unit=batch-lane-{action}.service\n" in timer
            assert "WantedBy=timers.target" in timer
            one = files[f"{host}/{target}/batch-lane-{action}.service"]
            assert "Type=oneshot" in one
            assert f" schedule {action} batch-lane.service\n" in one
    assert "WantedBy" not in files[f"{host}/systemd/batch-lane.service"]
    assert "WantedBy" not in files[f"{host}/quadlet/batch-lane.container"]
    assert "WantedBy=multi-user.target" in files[f"{host}/systemd/interactive.service"]


def test_without_a_schedule_nothing_changes(tmp_path: Path) -> None:
    text = LANES.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    path = tmp_path / "plain.yaml"
    path.write_text(text)
    name = "layouts/workstation-gpu-cpu-lanes.yaml"
    files = render(validate_file(path, name), name)
    for rel, body in files.items():
        assert (ROOT / "out" / rel).read_text() == body, rel


def test_schedule_units_pass_systemd_analyze(tmp_path: Path) -> None:
    files = _files(tmp_path, '"22:00-06:00, 12:00-13:00"')
    units = []
    for rel, body in files.items():
        if rel.startswith("workstation/systemd/"):
            unit = tmp_path / Path(rel).name
            unit.write_text(body)
            units.append(unit)
    rc, stderr = systemd_verify(sorted(units))
    assert rc == 0 and not stderr, stderr
    for action in ("start", "stop"):
        exposure, report = systemd_security(tmp_path / f"batch-lane-{action}.service")
        assert exposure <= 4.9, report


def test_a_service_named_like_a_schedule_unit_is_refused(tmp_path: Path) -> None:
    """batch-lane's schedule brings batch-lane-start.service; a service of that name
    would share its unit file."""
    path = _spec(tmp_path, '"22:00-06:00"')
    text = path.read_text()
    assert "\n  interactive:\n" in text
    path.write_text(text.replace("\n  interactive:\n", "\n  batch-lane-start:\n", 1))
    with pytest.raises(InvalidInput) as exc:
        validate_file(path)
    messages = [d.message for d in exc.value.diagnostics]
    assert any(
        m.startswith("services.batch-lane.schedule: brings the unit batch-lane-start.service")
        and "rename one of them" in m
        for m in messages
    ), messages


def test_a_unit_placed_after_a_scheduled_one_never_pulls_it_in(tmp_path: Path) -> None:
    """Services sharing a GPU start in the solver's order, each wanting the one before
    it; a scheduled one before it is only ordered after (After=), or starting the
    later service would start the scheduled one outside its windows."""
    from specs import VALID, write

    plain = validate_file(write(tmp_path, VALID, "plain.yaml"), "plain.yaml")
    first, later = plain.plan.order[0], plain.plan.order[1]
    unit = render(plain, "plain.yaml")[f"compute/systemd/{later}.service"]
    wants = next(line for line in unit.splitlines() if line.startswith("Wants="))
    assert f"{first}.service" in wants  # unscheduled: pulled in

    text = VALID.replace(f"  {first}:\n", f'  {first}:\n    schedule: "22:00-06:00"\n', 1)
    v = validate_file(write(tmp_path, text, "scheduled.yaml"), "scheduled.yaml")
    assert v.plan.order[:2] == plain.plan.order[:2]
    unit = render(v, "scheduled.yaml")[f"compute/systemd/{later}.service"]
    wants = next(line for line in unit.splitlines() if line.startswith("Wants="))
    assert f"{first}.service" not in wants
    assert any(
        line.startswith("After=") and f"{first}.service" in line for line in unit.splitlines()
    )
