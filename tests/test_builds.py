"""Unknown build = every build (layoutgen.solve.builds, issue 30).

A runtime without ``version:`` is planned under each epoch of its dated rules
(the spans of builds that answer every rule the plan asks alike): one expert
placement for all, each device booked at its largest, refused where any epoch
does not fit or where builds would be given different flags.  Seed 001's
layouts are the cases: their logs ran on ik_llama.cpp build 4357, whose rules
count ``--n-cpu-moe`` from blk.0, which build 4797 turned around.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutgen.core.rules import ASKED, rule
from layoutgen.core.runtime import Runtime
from layoutgen.render.validate import Validated, validate_file
from layoutgen.solve import builds
from layoutgen.solve.solver import DoesNotFit, solve, solve_at
from layoutgen.spec.schema import Spec

from conftest import run_cli

LAYOUTS = Path(__file__).resolve().parents[1] / "layouts"
MiB = 1 << 20


def _unversioned(spec: Spec) -> Spec:
    rts = {rid: r.model_copy(update={"version": None}) for rid, r in spec.runtimes.items()}
    return spec.model_copy(update={"runtimes": rts})


def _example(name: str) -> Validated:
    return validate_file(LAYOUTS / name)


def test_epochs_split_only_at_the_rules_a_plan_asked() -> None:
    asked = rule("t-asked", 200, "2025-01-02", "test", "asked")
    later = rule("t-later", 300, "2025-01-03", "test", "asked too")
    never = rule("t-never", 250, "2025-01-04", "test", "never asked")

    class Fake(Runtime):
        KIND = "fake"
        RULES = (asked, never, later)

    rt = Fake()
    ASKED.discard(never)
    assert builds.epochs(rt) == [builds.Epoch(None, None)] or asked not in ASKED
    asked.applies(None)
    later.applies(None)
    assert builds.epochs(rt) == [
        builds.Epoch(None, 199),
        builds.Epoch(200, 299),
        builds.Epoch(300, None),
    ]
    # each epoch is solved at a build inside it; the newest with the newest rules
    assert [e.build for e in builds.epochs(rt)] == [199, 200, None]
    assert builds.Epoch(200, 299).label(rt) == "builds b200-b299"


def test_n_cpu_moe_is_planned_both_ways_when_the_build_is_unknown() -> None:
    """Seed 001's --n-cpu-moe 64 ran blk.64-77 on the GPU (build 4357); from build
    4797 the same flag keeps blk.0-63's complement, 3-13, there.  Without a
    version both placements are shown and the GPU is booked for the larger."""
    v = _example("glm51-4-n-cpu-moe-64-1gpu.yaml")
    spec = _unversioned(v.spec)
    plan = solve(spec, v.services, v.profiles, "seed001-4", one_argv=False)
    said = " ".join(plan.warnings)
    # from 4196, the first ik build that loads glm-dsa: older builds run no GLM-5.1
    assert "builds 4196-4796: experts gpu1 64-77" in said, said
    assert "builds from 4797: experts gpu1 3-13" in said, said
    assert "planned for builds from 4196 (those that load its models and read" in said, said
    epochs = plan.runtimes["ik_llama"]["epochs"]
    assert isinstance(epochs, list) and len(epochs) >= 2
    gpu1 = plan.device("gpu1").used
    # at least what the seed's own build needs, and what every epoch needs
    assert gpu1 >= v.plan.device("gpu1").used
    assert all(gpu1 >= e["devices"].get("gpu1", 0) for e in epochs)
    assert plan.runtimes["ik_llama"]["rules"] == "every build"


def test_the_oom_of_n_cpu_moe_58_is_refused_without_a_version(tmp_path: Path) -> None:
    """The command that died with 'cudaMalloc failed: out of memory' (seed 001)
    validated when the newest rules alone planned it (they put blk.3-22 on the
    GPU, not blk.58-77); every build's plan refuses it, naming the builds."""
    text = (LAYOUTS / "invalid" / "glm51-n-cpu-moe-58-1gpu.yaml").read_text()
    text = re.sub(r'\n\s*version: "4357"\n', "\n", text)
    text = text.replace("profile: ../models/", f"profile: {LAYOUTS}/models/")
    assert 'version: "4357"' not in text
    spec = tmp_path / "n58.yaml"
    spec.write_text(text)
    result = run_cli(["validate", str(spec)])
    assert result.code == 1, result.stdout
    assert "does not fit GPU gpu1" in result.stdout
    assert "names no build, and under builds 4196-4796 it does not fit" in result.stdout


def test_flags_builds_read_differently_are_an_error_naming_each() -> None:
    """A qwen3moe model (ik loads it from build 3654) on GPUs: ik took a bare -fa until
    3927, had it on by default from 3928 and took -fa on|off from 3989; one argv cannot
    say flash attention on to all of them."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "bench"))
    import bench_solve

    from layoutgen.spec.roles import resolve

    # the GPU services alone (the CPU lane's '-fa on' says build 3985 or later)
    every = bench_solve.unversioned(bench_solve.spec())  # built with one sched copy
    gpu = {n: s for n, s in every.services.items() if s.gpus}
    spec = every.model_copy(update={"services": gpu})
    profiles = {"moe": bench_solve.model()}
    with pytest.raises(DoesNotFit) as caught:
        solve(spec, resolve(spec), profiles, "bench")
    message = str(caught.value)
    assert "runtimes.ik: no 'version:'" in message
    # (split at 3870 too, where --reasoning-budget came for its orchestrator role)
    assert "(builds 3654-3869: '-fa';" in message
    assert "builds from 3989: '-fa on', '--reasoning-budget 0')" in message


def test_a_model_only_new_builds_load_spells_flags_one_way() -> None:
    """GLM-5.1 (glm-dsa) loads from ik build 4196, after every -fa spelling change:
    seed 001's command, imported without a build, renders one argv for all."""
    v = _example("glm51-4-n-cpu-moe-64-1gpu.yaml")
    plan = solve(_unversioned(v.spec), v.services, v.profiles, "seed001-4")
    assert plan.service("grandpa").argv == v.plan.service("grandpa").argv


def test_auto_experts_fit_under_every_epoch() -> None:
    """Seed 001's final layout fills both GPUs with GLM experts; builds before 3745
    need 3-4 GiB more compute on each, so without a version the fill leaves room
    for them: every epoch's plan of the one placement fits every device."""
    v = _example("familiar-final.yaml")
    spec = _unversioned(v.spec)
    plan = solve(spec, v.services, v.profiles, "familiar", one_argv=False)
    limit = {d.id: d.capacity - d.reserve for d in plan.devices}
    for rid, assumed in plan.runtimes.items():
        for e in assumed.get("epochs", []):  # type: ignore[union-attr]
            for dev, used in e["devices"].items():
                assert used <= limit[dev], (rid, e["builds"], dev, used, limit[dev])
    assert all(d.free >= 0 for d in plan.devices)
    # one placement: the rendered argv is the same whichever build runs it
    grandpa = plan.service("grandpa")
    versioned = v.plan.service("grandpa")
    moved = sum(len(x) for d, x in grandpa.expert_layers.items() if d != "host")
    before = sum(len(x) for d, x in versioned.expert_layers.items() if d != "host")
    assert moved <= before


def test_a_written_version_is_planned_by_its_rules_alone() -> None:
    v = _example("glm51-4-n-cpu-moe-64-1gpu.yaml")
    plan = solve(v.spec, v.services, v.profiles, "seed001-4")
    assert plan == solve_at(v.spec, v.services, v.profiles, "seed001-4")
    assert "epochs" not in plan.runtimes["ik_llama"]
    assert not any("no 'version:'" in w for w in plan.warnings)
    assert plan.service("grandpa").expert_layers["gpu1"] == tuple(range(64, 78))


_PLAN_UNVERSIONED = """
import sys
from pathlib import Path
from layoutgen.solve.plan import to_json
from layoutgen.solve.solver import solve
from layoutgen.render.validate import validate_file
for name in sys.argv[1:]:
    v = validate_file(Path(name))
    rts = {r: x.model_copy(update={"version": None}) for r, x in v.spec.runtimes.items()}
    spec = v.spec.model_copy(update={"runtimes": rts})
    out = to_json(solve(spec, v.services, v.profiles, name, one_argv=False))
print(out, end="")
"""


def test_the_epochs_a_spec_shows_do_not_depend_on_what_ran_before() -> None:
    """rules.ASKED grows with every spec a process plans (render of several specs,
    validate layouts/*.yaml): a spec planned after another must give the same plan
    JSON as planned alone, its epochs merged where they plan alike."""
    import subprocess
    import sys

    b = str(LAYOUTS / "glm51-4-n-cpu-moe-64-1gpu.yaml")
    a = str(LAYOUTS / "familiar-final.yaml")
    run = [sys.executable, "-c", _PLAN_UNVERSIONED]
    alone = subprocess.run([*run, b], capture_output=True, text=True, check=True).stdout
    after = subprocess.run([*run, a, b], capture_output=True, text=True, check=True).stdout
    assert '"every build"' in alone
    assert alone == after


def test_a_flag_the_command_uses_is_a_floor() -> None:
    """-wgt came with ik build 4378: a command that passes it runs on no older build,
    so no older epoch is planned (and none of their -fa spellings is asked)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "bench"))
    import bench_solve

    from layoutgen.spec.roles import resolve

    every = bench_solve.unversioned(bench_solve.spec())
    gpu = {
        n: s.model_copy(update={"args": ("-wgt", "512")})
        for n, s in every.services.items()
        if s.gpus
    }
    spec = every.model_copy(update={"services": gpu})
    profiles = {"moe": bench_solve.model()}
    assert builds.floor_of(spec, resolve(spec), profiles, "ik") == 4378
    plan = solve(spec, resolve(spec), profiles, "bench")  # one spelling of -fa from 4378
    builds_planned = [e["builds"] for e in plan.runtimes["ik"]["epochs"]]
    assert builds_planned[0].startswith("builds 4378") or builds_planned == ["builds from 4378"]


def test_a_cached_answer_still_tells_a_trace_its_rules() -> None:
    """rules.remembering: a cache hit replays the rules the cached call asked, so a
    service plan reused across builds was traced whole (solve.solver._remembered)."""
    from layoutgen.core.rules import remembering, tracing

    flip = rule("t-cached", 500, "2025-02-01", "test", "asked inside a cached call")
    calls = []

    @remembering(8)
    def cached(x: int) -> int:
        calls.append(x)
        return x + int(flip.applies(None))

    with tracing() as first:
        assert cached(1) == 2
    with tracing() as second:
        assert cached(1) == 2  # a hit: not run again
    assert calls == [1]
    assert flip in first and flip in second


def test_reused_service_plans_are_what_each_build_plans_alone() -> None:
    """Every epoch a plan reports books what that build alone plans for the same
    placement: service plans reused across builds (solve.solver._remembered) are
    never stale."""
    import re as regex

    v = _example("familiar-final.yaml")
    spec = _unversioned(v.spec)
    plan = solve(spec, v.services, v.profiles, "familiar", one_argv=False)
    pinned = builds._pinned(v.services, plan)
    epochs = plan.runtimes["ik_llama"]["epochs"]
    assert len(epochs) >= 2
    for e in epochs:
        first = regex.search(r"(\d+)", e["builds"])
        assert first is not None
        alone = solve_at(
            builds._at(spec, "ik_llama", int(first[1])),
            v.services,
            v.profiles,
            "familiar",
            pinned=pinned,
            fit=False,
        )
        assert {d.id: d.used for d in alone.devices if d.used} == e["devices"], e["builds"]


def test_the_flags_as_written_bound_the_builds() -> None:
    """A flag's form is the build's: ik read -fa bare until 3927 and a value from 3985,
    -fmoe only 3571-3927, -no-fmoe from 3928 (ik's parser at every commit), so an
    unknown build is one of those that read the command; flags no build reads
    together bound nothing (validate refuses them: test_flags)."""
    from layoutgen.spec.flags import build_range

    ik = "ik_llama.cpp"
    assert build_range(ik, ["-fa"]) == (2771, 3927)
    assert build_range(ik, ["-fa", "--jinja"]) == (3835, 3927)  # --jinja came in 3835
    assert build_range(ik, ["-fa", "on", "--jinja"]) == (3985, None)
    assert build_range(ik, ["-fmoe"]) == (3571, 3927)
    assert build_range(ik, ["-no-fmoe", "-amb", "512"]) == (3928, None)
    assert build_range(ik, ["-fa", "-no-fmoe"]) is None
    assert build_range("llama.cpp", ["-fa"]) == (None, None)  # sampled: none exactly

    class Fake(Runtime):
        KIND = "fake"
        RULES = (
            rule("t-a", 3000, "2025-01-02", "test", "a"),
            rule("t-b", 3950, "2025-01-03", "test", "b"),
        )

    rt = Fake()
    asked = set(rt.RULES)
    # a ceiling ends the last epoch, which is then solved at its own first build
    assert builds.epochs(rt, asked, 2771, 3927) == [
        builds.Epoch(2771, 2999),
        builds.Epoch(3000, 3927),
    ]
    assert [e.build for e in builds.epochs(rt, asked, 2771, 3927)] == [2771, 3000]
    assert builds.epochs(rt, asked, 3985, None) == [builds.Epoch(3985, None)]


def test_a_bare_fa_with_a_model_newer_builds_load_is_refused(tmp_path: Path) -> None:
    """GLM-5.1 loads from ik 4196; a bare -fa is read only up to 3927: no build runs
    the service as written, and the refusal says what to write."""
    v = _example("glm51-3-cpu-moe-1gpu.yaml")
    spec = _unversioned(v.spec)
    # flags of builds 3576-3927 (-mla with a value from 3575, -amb from 3576)
    args = ["-fa", "-mla", "3", "-amb", "512"]
    svc = {n: s.model_copy(update={"args": args}) for n, s in spec.services.items()}
    from layoutgen.spec.roles import resolve

    spec = spec.model_copy(update={"services": svc})
    with pytest.raises(DoesNotFit) as caught:
        solve(spec, resolve(spec), v.profiles, "bare-fa", one_argv=False)
    said = " ".join(p.message for p in caught.value.problems)
    assert "no build runs these services" in said, said
    assert "build 4196 or newer" in said and "only up to build 3927" in said, said
