"""The rendered argv, read back with the runtime's own rules, gives the plan.

For every example layout and service: the ``-ot`` rules (regex search, first
match, in argument order) followed by what ``--cpu-moe`` / ``--n-cpu-moe``
add, applied to every routed-expert tensor of the profile, must put each
tensor exactly where the plan says.  Everything else layoutgen decides is
pinned too (-ngl, -fa, -ts, -fit off on mainline, 127.0.0.1).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutgen.core.override import Rule, apply
from layoutgen.core.placement import expert_layer, loaded
from layoutgen.render.validate import validate_file

from conftest import ROOT

LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))
CPU_MOE = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # llama.cpp common.h, ik the same


def _rules(argv: tuple[str, ...]) -> list[Rule]:
    rules: list[Rule] = []
    for i, arg in enumerate(argv):
        if arg == "-ot":
            pattern, target = argv[i + 1].rsplit("=", 1)
            rules.append(Rule(pattern, target))
        elif arg == "--cpu-moe":
            rules.append(Rule(CPU_MOE, "CPU"))
        elif arg == "--n-cpu-moe":
            n = int(argv[i + 1])
            rules += [
                Rule(rf"blk\.{k}\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU") for k in range(n)
            ]
    return rules


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_argv_reproduces_the_planned_expert_placement(layout: Path) -> None:
    v = validate_file(layout)
    for sp in v.plan.services:
        rs = next(r for r in v.services if r.name == sp.name)
        if not rs.gpus:
            continue
        profile = v.profiles[rs.service.model]
        rt = v.spec.runtimes[rs.service.runtime].rules()
        names = [t.name for t in loaded(profile, rt) if expert_layer(t.name) is not None]
        got = apply(_rules(sp.argv), names)
        planned = {n: dev for dev, layers in sp.expert_layers.items() for n in layers}
        single = {t: dev for dev, ts in sp.expert_tensors.items() for t in ts}
        buffer_of = {dev: buf for buf, dev in sp.device_of.items() if dev != "host"}
        for name in names:
            layer = expert_layer(name)
            assert layer is not None
            target = got[name] or sp.layer_buffer[layer]  # no rule: stays with its layer
            dev = single.get(name, planned[layer])
            expected = "CPU" if dev == "host" else buffer_of[dev]
            assert target == expected, (sp.name, name)
            # the plan's own account of moved tensors says the same
            moved = sp.moved.get(name, sp.layer_buffer[layer])
            assert (target == "CPU") == (moved not in buffer_of.values()), (sp.name, name)
            assert target == "CPU" or moved == target, (sp.name, name)


@pytest.mark.parametrize("layout", LAYOUTS, ids=[p.stem for p in LAYOUTS])
def test_argv_pins_every_decision(layout: Path) -> None:
    v = validate_file(layout)
    for sp in v.plan.services:
        argv = " ".join(sp.argv)
        svc = v.spec.services[sp.name]
        if v.spec.runtimes[svc.runtime].kind == "vllm":  # its decisions are budget flags
            for flag in ("--max-model-len", "--max-num-seqs", "--tensor-parallel-size"):
                assert f" {flag} " in argv
            assert " --gpu-memory-utilization " in argv
        else:
            assert re.search(r" -ngl (999|0) ", argv)
        container = v.spec.runtimes[svc.runtime].image is not None
        # In a container the server listens on the container's interfaces; the host
        # side publishes on 127.0.0.1 (render checks that). Native servers bind 127.0.0.1.
        bind = "0.0.0.0" if container or svc.expose else "127.0.0.1"
        assert f" --host {bind} --port {svc.port}" in argv
        if v.spec.runtimes[svc.runtime].kind == "llama.cpp":
            assert " -fit off " in argv
        gpus = len(next(r for r in v.services if r.name == sp.name).gpus)
        if gpus > 1 and v.spec.runtimes[svc.runtime].kind != "vllm":
            assert " -sm layer -ts " in argv


def test_tensor_split_shares_are_written_as_given(tmp_path: Path) -> None:
    """-ts carries the spec's shares: integers without '.0', fractions as written, never
    an exponent (llama.cpp parses each with stof)."""
    from layoutgen.solve.argv import _share

    assert [_share(x) for x in (97247, 12.5, 15.0, 1_500_000, 0.25)] == [
        "97247",
        "12.5",
        "15",
        "1500000",
        "0.25",
    ]
