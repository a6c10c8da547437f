"""Issue 36: reviewing a change, case by case, on seed 001's final layout and the other
examples: ``diff`` says all that changed, once, and nothing else; ``plan`` prints the
argv and where each layer sits; the lanes warning fits the schedules it names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

SPEC = "layouts/familiar-final.yaml"
FINAL = (ROOT / SPEC).read_text()
MiB = 1 << 20


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository holding seed 001's final layout as committed; tests edit it."""
    shutil.copytree(ROOT / "layouts" / "models", tmp_path / "layouts" / "models")
    (tmp_path / SPEC).write_text(FINAL)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "final")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _edit(repo: Path, old: str, new: str) -> None:
    text = (repo / SPEC).read_text()
    assert old in text
    (repo / SPEC).write_text(text.replace(old, new, 1))


def _summary(result_stdout: str) -> list[str]:
    return result_stdout.split("\n\n", 1)[0].splitlines()


def _json(*args: str) -> dict[str, object]:
    result = run_cli(["diff", "--format", "json", *args])
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    return doc


def test_fewer_max_layers_lists_every_tensor_that_left_the_gpus(repo: Path) -> None:
    """max_layers 20 -> 10: blk.59's three single tensors are listed with the layers,
    and the moves are the device deltas (-5,726 / -14,714 MiB) to the byte."""
    _edit(repo, "max_layers: 20", "max_layers: 10")
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert result.code == 2, result.stderr
    lines = _summary(result.stdout)
    assert lines[:3] == [
        "spec: services.grandpa.experts.max_layers 20 -> 10",
        "grandpa: gpu0 -> host, 4 tensors, 5,726 MiB: experts of blk.7; blk.59.ffn_down_exps",
        "grandpa: gpu1 -> host, 11 tensors, 14,714 MiB: experts of blk.8, 72-73; "
        "blk.59.ffn_gate_exps; blk.59.ffn_up_exps",
    ]
    assert (
        "gpu0: used 96,109 MiB -> 90,383 MiB (-5,726 MiB), free 626 MiB -> 6,352 MiB = "
        "grandpa tensors -5,726 MiB"
    ) in lines
    assert "check: the terms above sum to every device's change, to the byte" in lines
    doc = _json(f"HEAD:{SPEC}", SPEC)
    changes = doc["changes"]
    assert isinstance(changes, list)
    moved = {(c["old"], c["new"]): c for c in changes if c["kind"] == "moved"}
    assert set(moved) == {("gpu0", "host"), ("gpu1", "host")}
    assert "blk.59.ffn_down_exps.weight" in moved[("gpu0", "host")]["tensors"]
    for c in changes:
        if c["kind"] == "device" and c["device"] != "host":
            out = moved[(c["device"], "host")]["bytes_out"]
            assert c["used"][1] - c["used"][0] == -out


def test_a_smaller_gpu1_names_why_gpu0_changed_and_no_noop_lines(repo: Path) -> None:
    """gpu1 replaced by an 81,559 MiB card: gpu0's +617 MiB is explained (the layer
    split moved blk.41-43 there with their KV), the cascade is named, and nothing
    says 'reserve 512 MiB -> 512 MiB'."""
    text = (repo / SPEC).read_text()
    at = text.index("- id: gpu1")
    (repo / SPEC).write_text(text[:at] + text[at:].replace("vram: 97247MiB", "vram: 81559MiB", 1))
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert result.code == 2
    lines = _summary(result.stdout)
    assert lines[0] == "gpu1: capacity 97,247 MiB -> 81,559 MiB"
    assert not any("512 MiB -> 512 MiB" in line for line in lines)
    assert (
        "grandpa: gpu1 -> gpu0, 61 tensors, 2,153 MiB: blk.41-43's other tensors (the layer "
        "split); blk.73.ffn_down_exps"
    ) in lines
    assert (
        "cascade: gpu1 is smaller (96,735 -> 81,047 MiB usable), so grandpa's tensors moved "
        "(1 gpu0 -> host, 61 gpu1 -> gpu0, 10 gpu1 -> host)"
    ) in lines
    gpu0 = next(line for line in lines if line.startswith("gpu0: used"))
    assert gpu0 == (
        "gpu0: used 96,109 MiB -> 96,727 MiB (+617 MiB), free 626 MiB -> 8 MiB = grandpa "
        "tensors +515 MiB + grandpa created +45 MiB + grandpa kv +57 MiB"
    )


def test_a_device_whose_tensors_balance_says_so(repo: Path) -> None:
    """Half worker0's context: grandpa's experts shuffle over both GPUs; gpu1's use is
    unchanged, and its line says what came and went."""
    _edit(repo, "ctx: 262144 ", "ctx: 131072 ")
    result = run_cli(["diff", "--files=none", f"HEAD:{SPEC}", SPEC])
    assert result.code == 2
    lines = result.stdout.splitlines()
    assert (
        "gpu1: used 96,373 MiB (unchanged): grandpa tensors in 4,088 MiB, out 4,088 MiB"
    ) in lines
    assert (
        "cascade: naughty-worker0's ctx 262144 -> 131072, so grandpa's tensors moved "
        "(1 gpu0 -> gpu1, 3 gpu1 -> gpu0, 2 host -> gpu1)"
    ) in lines
    assert "+++" not in result.stdout  # --files=none: the summary alone


def test_a_service_added_says_each_warning_once(repo: Path) -> None:
    _edit(
        repo,
        "           --jinja, --warmup-batch, --alias, GLM-5.1]\n",
        "           --jinja, --warmup-batch, --alias, GLM-5.1]\n\n"
        "  cpu-lane:\n    role: batch\n    model: qwen3-coder-next-q4_0\n"
        "    runtime: ik_llama\n    port: 8010\n    ctx: 32768\n    threads: 8\n",
    )
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert result.code == 2
    lines = _summary(result.stdout)
    assert lines[0] == "service added: cpu-lane"
    warned = [line for line in lines if line.startswith("new warning: services.cpu-lane:")]
    assert len(warned) == 1, warned
    assert len(lines) == len(set(lines))
    host = next(line for line in lines if line.startswith("host: used"))
    assert host.endswith("= cpu-lane service +45,140 MiB (added)")


def test_a_one_line_change_reads_in_key_paths_not_plan_json_hunks(repo: Path) -> None:
    """The whole diff was 414 lines (292 of them plan.json hunks) for max_layers 20 -> 10;
    plan.json now reads by key path, and --files=units leaves out all but the units."""
    _edit(repo, "max_layers: 20", "max_layers: 10")
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    text = result.stdout
    plan = text.split("+++ b/compute/plan.json\n", 1)[1].split("\n--- ", 1)[0]
    assert not re.search(r"^@@", plan, re.M)
    assert "services.grandpa.expert_layers.gpu1: [8, 72-77] -> [74-77]" in plan.splitlines()
    assert len(text.splitlines()) < 200
    units = run_cli(["diff", "--files=units", f"HEAD:{SPEC}", SPEC])
    assert units.code == 2
    files = re.findall(r"^\+\+\+ b/(\S+)", units.stdout, re.M)
    assert files and all(f.split("/")[1] in ("podman", "quadlet", "systemd") for f in files)
    assert len(units.stdout.splitlines()) < 60
    bad = run_cli(["diff", "--files=some", f"HEAD:{SPEC}", SPEC])
    assert bad.code == 2 and "write one of summary, units, full, none" in bad.stderr


def test_the_same_layout_under_another_name_is_no_change(repo: Path) -> None:
    shutil.copy(repo / SPEC, repo / "layouts" / "renamed.yaml")
    result = run_cli(["diff", SPEC, "layouts/renamed.yaml"])
    assert result.code == 0, result.stdout
    assert result.stdout == (
        f"no change: the same layout as {SPEC}, named layouts/renamed.yaml (only the "
        "generated headers name it)\n"
    )


def test_a_spec_change_with_no_effect_says_why(repo: Path) -> None:
    """max_layers 20 -> 16: correct to change nothing (14 layers fit), and said so."""
    _edit(repo, "max_layers: 20", "max_layers: 16")
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert result.code == 0
    assert result.stdout == (
        "no effect: services.grandpa.experts.max_layers 20 -> 16: max_layers 16 > the 14 that fit\n"
    )


def test_plan_text_prints_argv_and_the_layers_each_device_holds(tmp_path: Path) -> None:
    """Seed 003's head 15 + tail 4 written as 20 single -ot rules (tensor_overrides):
    the plan says which layers' experts sit on which device, in ranges, and the argv."""
    shutil.copytree(ROOT / "layouts" / "models", tmp_path / "models")
    text = (ROOT / "layouts" / "glm51-head15-tail4-ctx65k.yaml").read_text()
    start = text.index("    experts:                         # --cpu-moe")
    end = text.index("\n", text.index("gpu1: [74-77]")) + 1
    rules = [(n, "gpu0") for n in range(3, 18)] + [(n, "gpu1") for n in range(74, 78)]
    ot = "".join(
        f'      - {{pattern: "blk\\\\.{n}\\\\.ffn_(up|gate|down)_exps", device: {d}}}\n'
        for n, d in rules
    )
    ot += '      - {pattern: "ffn_(up|gate|down)_exps", device: host}\n'
    spec = tmp_path / "ot.yaml"
    spec.write_text(text[:start] + "    tensor_overrides:\n" + ot + text[end:])
    result = run_cli(["plan", str(spec)])
    assert result.code == 0, result.stderr
    block = result.stdout.split("grandpa: layers by device", 1)[1].split("\n\n", 1)[0]
    assert block.splitlines()[1:] == [
        "  gpu0      layers 0-40",
        "            experts of 15 layers: 3-17",
        "  gpu1      layers 41-78, output, output_norm",
        "            experts of 4 layers: 74-77",
        "  host RAM  token_embd",
        "            experts of 56 layers: 18-73",
    ]
    argv = result.stdout.split("grandpa: argv\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert argv[0] == "  llama-server \\"
    assert "      -c 65536 \\" in argv
    assert argv[-1].startswith("      ") and not argv[-1].endswith("\\")


def test_plan_text_of_the_final_layout_keeps_expert_layers_and_adds_the_split() -> None:
    result = run_cli(["plan", str(ROOT / SPEC)])
    assert result.code == 0
    out = result.stdout
    assert "grandpa: expert layers\n  gpu0        7  3-7, 21, 40\n" in out
    assert "grandpa: layers by device (the layer split)\n  gpu0      layers 0-40\n" in out
    for name in ("grandpa", "naughty-worker0", "naughty-worker1"):
        assert f"\n{name}: argv\n  llama-server \\\n" in out


# ------------------------------------------------------------------ lanes warning


def _lanes(tmp: Path, batch: str | None, interactive: str | None) -> Path:
    """Seed 000's two lanes with the host's CPU named (its RAM bandwidth) and the
    interactive lane's experts partly in host RAM, so the two contend."""
    text = (ROOT / "layouts" / "workstation-gpu-cpu-lanes.yaml").read_text()
    assert "    model: EPYC 9175F " in text  # the layout carries seed 000's CPU
    # 36 of the 48 expert layers in host RAM: at 24 the lanes ask 96 % of the effective
    # bandwidth (the speed model's per-layer thread barriers leave it idle part of a token)
    text = text.replace(
        "    threads: 4                       # assumed\n",
        "    threads: 4\n    experts: {mode: n-cpu-moe, n: 36}\n",
    )
    if interactive is not None:
        text = text.replace("    port: 8000 ", f'    schedule: "{interactive}"\n    port: 8000 ')
    if batch is not None:
        text = text.replace("    port: 8001 ", f'    schedule: "{batch}"\n    port: 8001 ')
    if not (tmp / "models").exists():
        shutil.copytree(ROOT / "layouts" / "models", tmp / "models")
    path = tmp / f"lanes-{batch}-{interactive}.yaml".replace(":", "")
    path.write_text(text)
    return path


def _lane_warning(path: Path) -> str:
    from layoutgen.render.validate import validate_file

    (found,) = [d.message for d in validate_file(path).warnings if "host RAM for" in d.message]
    return found


def test_the_lanes_warning_does_not_tell_a_scheduled_batch_lane_to_take_a_schedule(
    tmp_path: Path,
) -> None:
    found = _lane_warning(_lanes(tmp_path, "22:00-06:00", None))
    assert found.startswith("services.batch-lane: interactive and batch-lane decode at the same")
    assert found.endswith(
        "they overlap 22:00-06:00 (interactive has no schedule, batch-lane runs 22:00-06:00); "
        "batch-lane already keeps 22:00-06:00: the overlap is interactive, which has no "
        "schedule and so runs all day; give interactive its hours (schedule:) outside "
        "22:00-06:00"
    )
    assert "give the batch lane a schedule" not in found


def test_the_lanes_warning_names_the_overlap_of_two_schedules(tmp_path: Path) -> None:
    found = _lane_warning(_lanes(tmp_path, "18:00-23:00", "08:00-20:00"))
    assert found.endswith(
        "they overlap 18:00-20:00 (interactive runs 08:00-20:00, batch-lane runs "
        "18:00-23:00); move batch-lane's schedule out of interactive's 08:00-20:00"
    )
    both = _lane_warning(_lanes(tmp_path, None, None))
    assert "they overlap all day (neither has a schedule)" in both
    assert both.endswith(
        "give the batch lane a schedule outside the interactive hours, and interactive its hours"
    )


def test_a_key_written_as_its_role_default_says_so(repo: Path) -> None:
    """Writing (or removing) what the role gives anyway: no effect, and whose default."""
    _edit(repo, "    role: orchestrator", "    parallel: 1\n    role: orchestrator")
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert result.code == 0, result.stdout
    assert result.stdout.splitlines()[0] == (
        "no effect: services.grandpa.parallel added: 1: 1 is what role orchestrator gives "
        "parallel anyway (role orchestrator: answers short and often, one slot)"
    )
