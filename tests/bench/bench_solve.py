"""Solve time on a big synthetic host: 8 GPUs, 12 services on 94-layer MoE models.

The model is Qwen3-235B-A22B-shaped (94 layers, 128 experts x 1536, 4 KV
heads x 128; public hyperparameters in shared/data/model-facts.md) at Q4_K
sizes; half the services are fixed workers, half fill GPUs with
``experts: auto``.  Prints the median of repeated in-process solves
(imports and profile loading excluded: this measures the solver).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from layoutgen.models.profile import HParams, Profile
from layoutgen.models.quants import tensor_nbytes
from layoutgen.models.tensors import Folded
from layoutgen.solve.solver import solve
from layoutgen.spec.roles import resolve
from layoutgen.spec.schema import Spec

RUNS = 31


def model() -> Profile:
    n, emb, ff, experts = 94, 4096, 1536, 128

    def entry(name: str, qtype: str, shape: tuple[int, ...]) -> Folded:
        return Folded(name, qtype, shape, tensor_nbytes(qtype, shape))

    blk = "blk.{0..93}."
    entries = (
        entry("token_embd.weight", "q4_k", (emb, 151936)),
        entry(blk + "attn_norm.weight", "f32", (emb,)),
        entry(blk + "attn_q.weight", "q4_k", (emb, 64 * 128)),
        entry(blk + "attn_k.weight", "q4_k", (emb, 4 * 128)),
        entry(blk + "attn_v.weight", "q6_k", (emb, 4 * 128)),
        entry(blk + "attn_output.weight", "q4_k", (64 * 128, emb)),
        entry(blk + "ffn_gate_inp.weight", "f32", (emb, experts)),
        entry(blk + "ffn_gate_exps.weight", "q4_k", (emb, ff, experts)),
        entry(blk + "ffn_up_exps.weight", "q4_k", (emb, ff, experts)),
        entry(blk + "ffn_down_exps.weight", "q6_k", (ff, emb, experts)),
        entry("output_norm.weight", "f32", (emb,)),
        entry("output.weight", "q6_k", (emb, 151936)),
    )
    hp = HParams(
        n_layer=n,
        n_embd=emb,
        n_head=64,
        n_head_kv=4,
        key_length=128,
        value_length=128,
        n_expert=experts,
        n_expert_used=8,
        expert_ff=ff,
        vocab=151936,
        n_ctx_train=40960,
    )
    return Profile("synthetic 94-layer MoE", "qwen3moe", "bench", hp, entries)


def spec() -> Spec:
    gpus = [{"id": f"gpu{i}", "index": i, "vram": "96GiB", "reserve": "1GiB"} for i in range(8)]
    services: dict[str, Any] = {}
    for i in range(12):
        auto = i % 2 == 1
        services[f"svc{i:02d}"] = {
            "model": "moe",
            "runtime": "ik",
            "port": 8000 + i,
            "ctx": 32768,
            "role": "orchestrator" if auto else "batch",
            "gpus": [f"gpu{(i // 2) % 8}", f"gpu{(i // 2 + 1) % 8}"] if auto else [],
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
            "priority": i,
            # CPU-only services render -fa off unless told: a q8_0 V cache needs it on
            "args": [] if auto else ["-fa", "on"],
        }
    return Spec.model_validate(
        {
            "host": {
                "name": "big",
                "cpu": {"cores": 64, "threads": 128},
                "ram": "2TiB",
                "ram_reserve": "64GiB",
                "gpus": gpus,
            },
            "models": {"moe": {"path": "/m/moe.gguf", "profile": "moe.yaml"}},
            "runtimes": {
                "ik": {"kind": "ik_llama.cpp", "image": "localhost/ik:4840", "version": "4840"}
            },
            "services": services,
        }
    )


def conflicts_spec(pairs: int = 12) -> Spec:
    """24 services in 12 conflicting pairs (4,096 scenarios if listed), on 8 GPUs."""
    data = spec().model_dump(mode="json", exclude_unset=True)
    base = data["services"]["svc01"]
    data["services"] = {}
    for i in range(2 * pairs):
        svc = dict(base, port=9000 + i, priority=i, gpus=[f"gpu{i % 8}"])
        svc["experts"] = {"mode": "host"}
        if i % 2 == 0:
            svc["conflicts"] = [f"c{i + 1:02d}"]
        data["services"][f"c{i:02d}"] = svc
    return Spec.model_validate(data)


def bench_conflicts() -> None:
    s, profiles = conflicts_spec(), {"moe": model()}
    services = resolve(s)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        solve(s, services, profiles, "bench")
        times.append(time.perf_counter() - start)
    print(
        f"solve 24 services in 12 conflicting pairs: median "
        f"{statistics.median(times) * 1000:.0f} ms over {RUNS} runs; target <= 100 ms"
    )


def speed_spec() -> Spec:
    """The same host with the speed model on: a CPU of the hardware table (its RAM
    bandwidth), GPUs by name, and ``policy: speed`` on every auto service."""
    data = spec().model_dump(mode="json", exclude_unset=True)
    data["host"]["cpu"]["model"] = "EPYC 9175F"
    for g in data["host"]["gpus"]:
        g["name"] = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    for svc in data["services"].values():
        if svc["role"] == "orchestrator":
            svc["experts"] = {"mode": "auto", "policy": "speed"}
    return Spec.model_validate(data)


def _median_ms(s: Spec, profiles: dict[str, Profile]) -> tuple[float, float, Any]:
    services = resolve(s)
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        plan = solve(s, services, profiles, "bench")
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, times[0] * 1000, plan


def _interleaved_ms(
    specs: list[Spec], profiles: dict[str, Profile], runs: int = RUNS
) -> list[float]:
    """Median solve time of each spec, the specs solved in turn RUNS times (a slow
    moment of the machine falls on all of them).  A spec without 'version:' is
    planned for every build, its flags left unchecked (one_argv=False): the time of
    the plan, which a refusal of its flags pays too."""
    resolved = [resolve(s) for s in specs]
    times: list[list[float]] = [[] for _ in specs]
    for _ in range(runs):
        for i, (s, services) in enumerate(zip(specs, resolved, strict=True)):
            start = time.perf_counter()
            solve(s, services, profiles, "bench", one_argv=False)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) * 1000 for t in times]


def unversioned(s: Spec) -> Spec:
    """S with every runtime's 'version:' removed (planned for every build), on a build
    made with GGML_SCHED_MAX_COPIES=1: with pipeline copies, ik builds before 3941 keep
    every host expert tensor on the first GPU once per copy (ik discussion 816), which
    no GPU here holds, so an unknown build of the default kind is refused."""
    rts = {
        rid: r.model_copy(update={"version": None, "sched_copies": 1})
        for rid, r in s.runtimes.items()
    }
    return s.model_copy(update={"runtimes": rts})


def bench_every_build(profiles: dict[str, Profile]) -> None:
    """Issue 30: the same host with no 'version:' is solved under each epoch of ik's
    rules that the plan asks; target within 3x of the solve with a version."""
    from layoutgen.solve.builds import epochs, span_of

    versioned = unversioned(spec())
    versioned = versioned.model_copy(
        update={
            "runtimes": {
                rid: r.model_copy(update={"version": "4840"})
                for rid, r in versioned.runtimes.items()
            }
        }
    )
    known, unknown = _interleaved_ms([versioned, unversioned(spec())], profiles, runs=11)
    s = unversioned(spec())
    floor, ceiling = span_of(s, resolve(s), profiles, "ik")
    n = len(epochs(s.runtimes["ik"].rules(), floor=floor, ceiling=ceiling))
    print(
        f"solve with no 'version:' ({n} epochs of ik's rules): median {unknown:.0f} ms = "
        f"{unknown / known:.2f}x of the solve with one ({known:.0f} ms), the two "
        "interleaved; target <= 3x"
    )


def main() -> None:
    profiles = {"moe": model()}
    median, first, plan = _median_ms(spec(), profiles)
    on_gpu = sum(len(v) for sp in plan.services for d, v in sp.expert_layers.items() if d != "host")
    print(
        f"solve 8 GPUs, 12 services, 94-layer MoE: median {median:.0f} "
        f"ms over {RUNS} runs, first {first:.0f} ms (per-profile caches cold); "
        f"{on_gpu} expert layers placed on GPUs; target <= 100 ms"
    )
    _, _, plan = _median_ms(speed_spec(), profiles)
    tps = [sp.speed.decode_tps for sp in plan.services if hasattr(sp.speed, "decode_tps")]
    plain, fast = _interleaved_ms([spec(), speed_spec()], profiles)
    print(
        f"solve with speed optimisation (policy: speed, speeds, next-GiB and trades for "
        f"{len(tps)} services): median {fast:.0f} ms = {fast / plain:.2f}x of the plain "
        f"solve ({plain:.0f} ms), the two interleaved; target <= 2x"
    )
    bench_conflicts()
    bench_every_build(profiles)


if __name__ == "__main__":
    main()
