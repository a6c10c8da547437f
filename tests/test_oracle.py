"""Plans against what the real llama.cpp allocates (issue 6, DESIGN §9).

For every case of tests/oracle/cases.py: generate the model with GGUFWriter,
profile it with ``layoutgen inspect``, write a layout whose devices are two
``ggml-rpc-server`` processes on 127.0.0.1, take the argv from ``layoutgen
plan --json`` and run llama-completion with it.  Then, buffer by buffer, the
sizes llama.cpp logs must match the plan (weights 0.5 %, KV 1 %, the
estimated compute buffers 15 %), and every
layer and every expert tensor must sit where the plan put it.

The runtime is built by ``make runtime`` (a dependency of ``make test``);
these tests fail, never skip, when it is missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.oracle import cases, harness, models

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """arch -> (GGUF, profile written by `layoutgen inspect`)."""
    root = tmp_path_factory.mktemp("oracle-models")
    out: dict[str, tuple[Path, Path]] = {}
    for arch, build in models.BUILDERS.items():
        gguf = build(root / f"{arch}.gguf")
        profile = root / f"{arch}.profile.yaml"
        subprocess.run(
            [str(BIN / "layoutgen"), "inspect", str(gguf), "-o", str(profile)], check=True
        )
        out[arch] = (gguf, profile)
    return out


def _case_run(
    case: cases.Case, built: dict[str, tuple[Path, Path]], tmp: Path, endpoints: list[str]
) -> tuple[dict[str, Any], Path]:
    gguf, profile = built[case.arch]
    spec = tmp / "layout.yaml"
    (tmp / profile.name).write_bytes(profile.read_bytes())
    spec.write_text(
        cases.spec_text(
            case, gguf, Path(profile.name), endpoints, harness.binary("llama-completion")
        )
    )
    return cases.plan(spec)["services"]["oracle"], spec


def _gpu_buffers(service: dict[str, Any]) -> dict[str, str]:
    """GPU id (rpc0, ...) -> its buffer name, from the plan."""
    return {b["device"]: name for name, b in service["buffers"].items() if b["device"] != "host"}


def _check_placement(case: cases.Case, service: dict[str, Any], run: harness.Run) -> None:
    n_layer = max(run.layer_device)  # llama.cpp logs the output layer as layer n_layer
    planned = {layer: buf for buf, layers in service["layers"].items() for layer in layers}
    logged = {
        layer: run.device_buffer[dev]
        for layer, dev in run.layer_device.items()
        if layer < n_layer and dev != "CPU"  # CPU: the first layers of a partial -ngl
    }
    assert logged == planned, f"{case.name}: layer split differs"
    on_cpu = {layer for layer, dev in run.layer_device.items() if dev == "CPU" and layer < n_layer}
    assert on_cpu == set(range(n_layer)) - set(planned), f"{case.name}: CPU layers differ"
    if case.gpu_layers == 0:  # -ngl 0: the output layer stays on the CPU too
        assert run.layer_device[n_layer] == "CPU", "output layer"
    else:  # the output layer goes with the last layer's device
        last = planned[n_layer - 1]
        assert run.device_buffer[run.layer_device[n_layer]] == last, "output layer"

    # Every tensor an override moved, and every routed-expert tensor, sits where the
    # plan says: the log names each override ("buffer type overridden to X").
    layer_of = {n: run.device_buffer.get(dev, "host") for n, dev in run.layer_device.items()}
    experts = [
        f"blk.{n}.ffn_{part}_exps.weight"
        for layers in service["expert_layers"].values()
        for n in layers
        for part in ("gate", "up", "down")
    ]
    for tensor in sorted({*run.overrides, *service["moved"], *experts}):
        layer = int(tensor.split(".")[1]) if tensor.startswith("blk.") else n_layer
        got = _where(run.overrides.get(tensor, layer_of.get(layer, "host")))
        want = _where(service["moved"].get(tensor, planned.get(layer, "host")))
        assert got == want, f"{case.name}: {tensor} on {got}, planned {want}"


def _where(buffer: str) -> str:
    """A buffer as a device: host RAM whatever the runtime calls its host buffer."""
    return "host" if buffer in ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host") else buffer


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_plan_matches_llama_cpp(
    case: cases.Case, built: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    with harness.rpc_servers(case.devices) as endpoints:
        service, _ = _case_run(case, built, tmp_path, endpoints)
        argv = service["argv"]
        assert argv.index("--rpc") < argv.index("-ngl")
        if "-ot" in argv:
            assert argv.index("--rpc") < argv.index("-ot")
        run = harness.run(harness.completion_argv(argv))

    _check_placement(case, service, run)
    mapped = "-lm" not in case.args and not case.mlock
    if case.mlock:
        assert argv[argv.index("-lm") + 1] == "mlock" and "--mlock" not in argv
    checked = 0
    for row in cases.compare(case, service, run):
        if row.buffer == "CPU_Mapped" and mapped:
            # llama.cpp logs the span of the file it maps, GPU tensors between
            # host ones included; the plan counts the bytes of host tensors.
            assert row.logged >= row.predicted, row
            continue
        assert row.logged, f"{case.name}: plan has {row.buffer} {row.part}, the log does not"
        if row.basis == "upper-bound":
            # bounded, not derived: never below the log, and not wildly above it
            assert 0 <= row.error <= cases.UPPER_BOUND_SLACK, row
        else:
            assert abs(row.error) <= cases.TOLERANCE[row.part], row
        checked += 1
    # weights, KV and compute on every device, and the host's compute buffer (with
    # -ngl 0 the devices hold nothing at all: then at least the host's buffers)
    assert checked >= (3 * case.devices + 1 if case.gpu_layers != 0 else 3)


def test_without_the_pins_llama_cpp_places_layers_its_own_way(
    built: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """-ts pins the plan's uneven split; without it (and -fit off) llama.cpp splits
    by the free memory its devices report, which is not what the plan budgeted."""
    uneven = cases.Case("uneven", "qwen3moe", "gpu")
    with harness.rpc_servers(2) as endpoints:
        gguf, profile = built[uneven.arch]
        (tmp_path / profile.name).write_bytes(profile.read_bytes())
        spec = tmp_path / "layout.yaml"
        text = cases.spec_text(
            uneven, gguf, Path(profile.name), endpoints, harness.binary("llama-completion")
        )
        # the first device is four times the second: the plan splits 4:1
        text = text.replace("{id: rpc1, vram: 256MiB", "{id: rpc1, vram: 64MiB", 1)
        spec.write_text(text)
        service = cases.plan(spec)["services"]["oracle"]
        argv = service["argv"]
        assert argv[argv.index("-ts") + 1] == "256,64"
        pinned = harness.run(harness.completion_argv(argv))
        loose_argv = _without(argv, {"-ts": 1, "-sm": 1, "-fit": 1, "-ngl": 1, "-fa": 1})
        loose = harness.run(harness.completion_argv(loose_argv))

    n_layer = max(pinned.layer_device)
    planned = {layer: buf for buf, layers in service["layers"].items() for layer in layers}
    pinned_split = {
        n: pinned.device_buffer[d] for n, d in pinned.layer_device.items() if n < n_layer
    }
    loose_split = {n: loose.device_buffer[d] for n, d in loose.layer_device.items() if n < n_layer}
    assert pinned_split == planned
    assert loose_split != planned
    # and the buffers follow: the second device holds more than the plan budgeted
    second = f"RPC0[{endpoints[1]}]"
    assert loose.buffers[second]["weights"] > pinned.buffers[second]["weights"]


def _without(argv: list[str], flags: dict[str, int]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in flags:
            i += 1 + flags[argv[i]]
            continue
        out.append(argv[i])
        i += 1
    return out
