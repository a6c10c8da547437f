"""Services of a budgeted runtime (vLLM): one budget per GPU, placed whole.

A vLLM service's footprint on each of its GPUs is one part: its share of the
weights (exact), the KV cache for ``parallel`` requests of ``ctx`` tokens
(exact where ``--kv-cache-memory-bytes`` pins it), the activation peak,
non-torch memory and CUDA graphs (estimated, high rather than low), and the
CUDA context where the release keeps it outside vLLM's budget (from 0.9.2;
0.8.0-0.9.1 count it inside): ``host.gpu_overhead``, else the GPU class's
default, with, from vLLM 0.11.0 on more than one GPU, the NCCL buffers it
allocates before its snapshot (outside the budget too).  The solver never
splits or moves it: it fits whole, or the layout is refused.  vLLM also
refuses to start unless ``utilization x total`` is free when it starts, so each
GPU's start-up check is computed at the service's place in the start order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from layoutgen.errors import Problem, Severity
from layoutgen.models.profile import Profile
from layoutgen.runtimes.vllm import Budget, Vllm, plan_budget, vllm_model
from layoutgen.runtimes.vllm import memory as vm
from layoutgen.solve.footprint import device_order
from layoutgen.solve.overhead import per_gpu
from layoutgen.solve.plan import BudgetPlan, Part, ServicePlan, StartCheck
from layoutgen.spec.checks import conflicting
from layoutgen.spec.roles import ResolvedService, resolve_service
from layoutgen.spec.schema import Spec

#: the plan's name for the LoRA CPU cache (vLLM logs no buffer for it)
LORA_CACHE = "CPU_LoRA_cache"


def max_model_len(rs: ResolvedService, profile: Profile) -> int:
    """``ctx``, or the trained context for ``ctx: 0`` (vLLM's own default)."""
    return rs.service.ctx or profile.hparams.n_ctx_train or 0


def budget(
    spec: Spec, rs: ResolvedService, profile: Profile, room: int | None = None
) -> tuple[Budget, tuple[str, ...], tuple[str, ...]]:
    """The service's budget, its GPU ids in CUDA order and their buffer names."""
    rt = spec.runtimes[rs.service.runtime].rules()
    assert isinstance(rt, Vllm)
    gpus, names, _ = device_order(spec, rs.gpus)
    vram = {g.id: g.vram for g in spec.host.gpus}
    names_of = {g.id: g.name for g in spec.host.gpus}
    by_id = {g.id: g for g in spec.host.gpus}
    svc = rs.service
    spec_tokens = svc.speculative.num_tokens if svc.speculative is not None else 0
    model = vllm_model(profile, len(gpus), mtp=bool(spec_tokens))
    slots = lora_slots(rs)
    found = plan_budget(
        rt,
        model,
        [vram[g] for g in gpus],
        max_model_len=max_model_len(rs, profile),
        max_num_seqs=max_num_seqs(spec, rs),
        parallel=rs.parallel,
        max_num_batched_tokens=rs.batch,
        kv_cache_dtype=svc.kv_cache_dtype or "auto",
        enforce_eager=bool(svc.enforce_eager),
        room=room,
        lora=0 if slots is None else vm.lora_gpu_bytes(model, slots, len(gpus)),
        lora_exact=model.intermediate_size > 0 and not model.moe_top_k,
        spec=spec_tokens,
        estimate_cudagraphs=vm.env_flag(svc.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")),
        flashinfer_sampler=vm.env_flag(svc.env.get("VLLM_USE_FLASHINFER_SAMPLER")),
        nvlink=vm.nvlink_between(dict(svc.env), [names_of.get(g) for g in gpus]),
        # the context vLLM 0.8.0-0.9.1 count inside the budget: the figure that sits
        # beside it from 0.9.2 (context_outside), the largest of the service's GPUs
        context=max(per_gpu(spec.host, by_id[g]) for g in gpus),
    )
    return found, gpus, names


def max_num_seqs(spec: Spec, rs: ResolvedService) -> int:
    """``max_num_seqs``, else vLLM's default for the release and the smallest of the
    service's GPUs (:func:`~layoutgen.runtimes.vllm.memory.default_max_num_seqs`),
    rendered either way; never below ``parallel`` (the KV cache holds ``parallel``
    requests because the scheduler may run that many)."""
    if rs.service.max_num_seqs is not None:
        return rs.service.max_num_seqs
    rt = spec.runtimes[rs.service.runtime].rules()
    assert isinstance(rt, Vllm)
    by_id = {g.id: g for g in spec.host.gpus}
    smallest = min((by_id[g] for g in rs.gpus), key=lambda g: g.vram)
    seqs = vm.default_max_num_seqs(rt.release_text, smallest.vram, smallest.name, rs.batch)
    return max(seqs, rs.parallel)


def context_outside(spec: Spec, rs: ResolvedService, gpu: str) -> int:
    """The CUDA context beside the budget on ``gpu``, where the service's release
    measures its budget after the context: ``host.gpu_overhead`` where written, else the
    default of the GPU's class (:func:`layoutgen.solve.overhead.per_gpu`).  0 where the
    release counts the context as non-torch memory inside the budget (0.6.5-0.6.6,
    0.8.0-0.9.1: :func:`~layoutgen.runtimes.vllm.memory.context_in_budget`): counting it
    beside as well planned it twice (issue 35).

    The class defaults hold vLLM's own: the 0.10.2+ logs print what was in use when
    its start-up snapshot was taken ("Free memory on device (F/T GiB) on startup": the
    context, and anything else on the GPU), 0.41-0.49 GiB on A100s and 0.61 on an
    H100 (768 MiB for the class), 0.44 on a 24 GB card (512 MiB up to Ada)."""
    rt = spec.runtimes[rs.service.runtime].rules()
    assert isinstance(rt, Vllm)
    if vm.context_in_budget(rt.release_text):
        return 0
    by_id = {g.id: g for g in spec.host.gpus}
    return per_gpu(spec.host, by_id[gpu])


def lora_slots(rs: ResolvedService) -> vm.LoraSlots | None:
    """``--max-loras``, ``--max-lora-rank``, ``--max-cpu-loras`` with vLLM's defaults
    (vllm/config/lora.py of 0.11.0: 1, 16, max_loras)."""
    lora = rs.service.lora
    if lora is None:
        return None
    n = lora.max_loras or 1
    return vm.LoraSlots(n, lora.max_lora_rank or 16, lora.max_cpu_loras or n)


def _mtp_missing(rs: ResolvedService, profile: Profile) -> Problem | None:
    spec = rs.service.speculative
    if spec is None or spec.method != "mtp" or profile.hparams.nextn_layers:
        return None
    return Problem(
        ("services", rs.name, "speculative", "method"),
        f"services.{rs.name}.speculative.method: model {rs.service.model!r} has no MTP "
        "layers (its profile has no nextn_layers: config.json's num_nextn_predict_layers "
        "or mtp_num_hidden_layers, and their tensors); use a checkpoint that keeps them, "
        "or remove 'speculative:'",
    )


def _race(
    spec: Spec, rs: ResolvedService, exc: vm.KvCacheRefused, gpus: Sequence[str]
) -> Problem | None:
    """The KV cache does not fit beside the services on its GPUs: name them, and say
    how to keep them apart (never 'ctx: 0': that is the trained context, longer)."""
    clash = conflicting(spec)[rs.name]
    tenants = sorted(
        o
        for o in spec.services
        if o != rs.name and o not in clash and set(resolve_service(spec, o).gpus) & set(gpus)
    )
    if not tenants:
        return None
    named = ", ".join(tenants[:-1]) + " and " + tenants[-1] if len(tenants) > 1 else tenants[0]
    rest = "others start" if len(tenants) > 1 else "other starts"
    hold = "hold" if len(tenants) > 1 else "holds"
    fits = exc.estimated_max_model_len
    return Problem(
        ("services", rs.name),
        f"services.{rs.name}: vLLM would refuse to start beside {named}: one request of "
        f"{exc.max_model_len:,} tokens needs {_mib(exc.needed)} of KV cache per GPU, and "
        f"{_mib(exc.available)} is left on the tightest of its GPUs after its weights, "
        f"activations and CUDA graphs and what {named} {hold} there. If {rs.name} never needs "
        f"to run at the same time as {named}, make them alternatives: "
        f"'conflicts: [{', '.join(tenants)}]' on {rs.name}, and 'default: true' on the one "
        f"that starts at boot (the {rest} by 'systemctl start NAME'); else give it "
        "GPUs of its own"
        + (f", or write ctx: {fits} or less (about {fits:,} tokens fit)" if fits > 0 else ""),
    )


def service_plan(
    spec: Spec,
    rs: ResolvedService,
    profile: Profile,
    beside: Mapping[str, int],
) -> ServicePlan | Problem:
    """The service's plan, or the located problem vLLM would refuse to start with:
    its KV cache cannot hold one ``ctx`` request beside ``beside`` (GPU id -> what
    the services that run with it already hold there)."""
    missing = _mtp_missing(rs, profile)
    if missing is not None:
        return missing
    seqs = rs.service.max_num_seqs
    if seqs is not None and seqs > rs.batch:
        return Problem(
            ("services", rs.name, "max_num_seqs"),
            f"services.{rs.name}.max_num_seqs: {seqs} requests at once is more than batch "
            f"({rs.batch}, --max-num-batched-tokens), which vLLM refuses; write "
            f"max_num_seqs: {rs.batch} or less, or batch: {seqs} or more",
        )
    gpus = device_order(spec, rs.gpus)[0]
    limits = {g.id: g.vram - g.reserve for g in spec.host.gpus}
    context = {g: context_outside(spec, rs, g) for g in gpus}
    room = min(limits[g] - beside.get(g, 0) - context[g] for g in gpus)
    try:
        b, gpus, names = budget(spec, rs, profile, room)
    except vm.KvCacheRefused as exc:
        race = _race(spec, rs, exc, gpus) if any(beside.get(g, 0) for g in gpus) else None
        if race is not None:
            return race
        return Problem(
            ("services", rs.name, "ctx"),
            f"services.{rs.name}.ctx: vLLM would refuse to start: one request of "
            f"{exc.max_model_len:,} tokens needs {_mib(exc.needed)} of KV cache per GPU, "
            f"and {_mib(exc.available)} is left on the tightest of its GPUs after the "
            "weights, activations, CUDA graphs and the services beside it; "
            + (
                f"about {exc.estimated_max_model_len:,} tokens fit: write ctx: "
                f"{exc.estimated_max_model_len} or less"
                if exc.estimated_max_model_len > 0
                else "not one token fits: use a smaller model"
            )
            + (
                ""
                if (rs.service.kv_cache_dtype or "auto").startswith("fp8")
                else ", kv_cache_dtype: fp8"
            )
            + ", or give it more GPUs",
        )
    compute = b.activation.bytes + b.non_torch.bytes + b.cudagraph.bytes
    parts = {
        g: Part(
            weights=b.weights.bytes + b.lora.bytes,
            kv=b.kv.bytes,
            compute=compute,
            # the CUDA context where the release keeps it outside the budget, and the
            # NCCL buffers vLLM allocates before its snapshot
            overhead=context[g] + b.nccl.bytes,
            basis={"weights": "exact", "kv": str(b.kv.basis), "compute": "estimated"},  # type: ignore[dict-item]
        )
        for g in gpus
    }
    lora = (("lora", b.lora.bytes, str(b.lora.basis)),) if rs.service.lora else ()
    nccl = (("nccl", b.nccl.bytes, "upper-bound"),) if b.nccl.bytes else ()
    terms = (
        ("weights", b.weights.bytes, "exact"),
        *lora,
        ("activation", b.activation.bytes, "estimated"),
        ("non_torch", b.non_torch.bytes, "upper-bound"),
        *nccl,
        ("cudagraph", b.cudagraph.bytes, "estimated"),
        ("kv", b.kv.bytes, str(b.kv.basis)),
    )
    plan = BudgetPlan(
        max_model_len=b.service.max_model_len,
        max_num_seqs=b.service.max_num_seqs,
        parallel=rs.parallel,
        tensor_parallel_size=len(gpus),
        terms=terms,
        cudagraph_in_budget=b.cudagraph_in_budget,
        budget=b.budget,
        utilization=b.utilization,
        rounded_up=b.rounded_up,
        kv_cache_memory_bytes=b.kv_cache_memory_bytes,
        kv_bytes_per_token=b.kv_bytes_per_token,
        block_size=b.block_size,
        kv_tokens=b.kv_tokens,
        max_concurrency=b.max_concurrency,
    )
    buffers = {name: parts[g] for name, g in zip(names, gpus, strict=True)}
    device_of = dict(zip(names, gpus, strict=True))
    slots = lora_slots(rs)
    if slots is not None:
        # the CPU cache of max_cpu_loras adapters, in host RAM
        model = vllm_model(profile, len(gpus))
        buffers[LORA_CACHE] = Part(
            weights=vm.lora_host_bytes(model, slots), basis={"weights": "upper-bound"}
        )
        device_of[LORA_CACHE] = "host"
    return ServicePlan(
        name=rs.name,
        buffers=buffers,
        device_of=device_of,
        expert_layers={},
        layer_buffer={},
        budget=plan,
    )


def interconnect_notes(spec: Spec, services: Sequence[ResolvedService]) -> list[Problem]:
    """A warning for each tensor-parallel vLLM service planned with NVLink's NCCL
    buffers only because nothing says its GPUs lack NVLink (vm.nvlink_between): the
    larger figure is the safe one, and the user can free the difference."""
    names_of = {g.id: g.name for g in spec.host.gpus}
    out = []
    for rs in services:
        runtime = spec.runtimes.get(rs.service.runtime)
        if runtime is None or runtime.kind != "vllm" or len(rs.gpus) < 2:
            continue
        names = [names_of.get(g) for g in rs.gpus]
        if vm.nvlink_between(dict(rs.service.env), names) is not None:
            continue
        gap = _mib(vm.NON_TORCH_TP - vm.NON_TORCH_TP_PCIE)
        why = (
            "its GPUs have no 'name:' in host.gpus (probe writes them)"
            if not all(names)
            else "whether these cards are bridged is not known"
        )
        out.append(
            Problem(
                ("services", rs.name, "gpus"),
                f"services.{rs.name}: tensor parallel planned with NVLink's NCCL buffers "
                f"({_mib(vm.NON_TORCH_TP)} a GPU), as {why}; over PCIe NCCL takes "
                f"{_mib(vm.NON_TORCH_TP_PCIE)}: name cards without NVLink (GeForce RTX 40/50, "
                "L4, L40S, ...), or set NCCL_P2P_DISABLE=1 in 'env:' where they are not "
                f"bridged, and {gap} a GPU goes to the KV cache",
                Severity.WARNING,
            )
        )
    return out


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in (*release, 0, 0)[: max(len(release), 3)])


def release_notes(spec: Spec, services: Sequence[ResolvedService]) -> list[Problem]:
    """A warning for each vLLM runtime without ``version:``: its services are planned by
    the newest release's rules (one release, not every one: a budgeted runtime has no
    epochs), and the memory rules that depend on the release are named, with the
    release to write (the image's tag, where it names one)."""
    from layoutgen.runtimes.vllm import _VERSION, NEWEST

    users: dict[str, list[str]] = {}
    for rs in services:
        runtime = spec.runtimes.get(rs.service.runtime)
        if runtime is not None and runtime.kind == "vllm" and runtime.version is None:
            users.setdefault(rs.service.runtime, []).append(rs.name)
    out = []
    for rid, names in sorted(users.items()):
        image = spec.runtimes[rid].image or ""
        tag = image.rpartition("/")[2].partition(":")[2].partition("@")[0]
        tagged = tag.lstrip("v") if tag and _VERSION.fullmatch(tag) else None
        rules = (
            f"the CUDA context beside the budget (from {_dotted(vm.SNAPSHOT_BASELINE)}), "
            "tensor-parallel NCCL buffers taken before vLLM measures (from 0.11.0), "
            "the FlashInfer sampler only with VLLM_USE_FLASHINFER_SAMPLER=1 (from "
            f"{_dotted(vm.FLASHINFER_SAMPLER_OPT_IN)}), CUDA graphs estimated inside "
            f"--gpu-memory-utilization (from {_dotted(vm.CUDAGRAPH_ESTIMATE_DEFAULT)}) and "
            f"{NEWEST}'s default --max-num-seqs"
        )
        if tagged is not None:
            fix = f'its image\'s tag says {tag}: write version: "{tagged}"'
        else:
            fix = (
                "write the release its image holds as 'version:' (python3 -c 'import vllm; "
                "print(vllm.__version__)' inside it)"
            )
        out.append(
            Problem(
                ("runtimes", rid),
                f"runtimes.{rid}: no 'version:', so "
                + (
                    f"service {names[0]} is"
                    if len(names) == 1
                    else f"services {', '.join(sorted(names))} are"
                )
                + f" planned by vLLM {NEWEST}'s rules (the newest layoutgen read): {rules}; an "
                f"older release counts these differently and may not fit the plan, so {fix}",
                Severity.WARNING,
            )
        )
    return out


def start_checks(
    spec: Spec, placed: Mapping[str, ServicePlan], order: Sequence[str]
) -> tuple[dict[str, ServicePlan], list[Problem]]:
    """Each budgeted service's start-up check on each of its GPUs, in the start order.

    Free at its turn = capacity - reserve - what the services started before
    it on that GPU hold (those it conflicts with never run beside it) - its own
    CUDA context and, from 0.11.0 with tensor parallelism, its NCCL buffers (vLLM
    takes its snapshot after both: the part's overhead).  vLLM refuses to start
    when that is below ``ceil(total x --gpu-memory-utilization)``.
    """
    clash = conflicting(spec)
    by_id = {g.id: g for g in spec.host.gpus}
    out: dict[str, ServicePlan] = {}
    problems: list[Problem] = []
    for i, name in enumerate(order):
        sp = placed.get(name)
        if sp is None or sp.budget is None:
            continue
        rt = spec.runtimes[spec.services[name].runtime].rules()
        assert isinstance(rt, Vllm)
        checks = []
        for buf, gpu in sp.device_of.items():
            if gpu == "host":
                continue
            earlier = [
                o
                for o in order[:i]
                if o in placed and o not in clash[name] and gpu in placed[o].device_of.values()
            ]
            held = sum(
                p.total
                for o in earlier
                for b, p in placed[o].buffers.items()
                if placed[o].device_of[b] == gpu
            )
            g = by_id[gpu]
            if earlier and not rt.follows("snapshot-baseline"):
                problems.append(
                    Problem(
                        ("services", name),
                        f"services.{name}: vLLM {rt.release_text} counts everything in "
                        f"use on GPU {gpu} as its own (before 0.9.2 its profile subtracts the "
                        "GPU's used memory), so started after "
                        + ", ".join(earlier)
                        + f" its KV cache would lose the {_mib(held)} they hold; start it "
                        "before them (priority), or use vLLM 0.9.2 or newer",
                    )
                )
            free = g.vram - g.reserve - held - sp.buffers[buf].overhead
            requested = -(-g.vram * int(sp.budget.utilization.replace(".", "")) // 1000)
            check = StartCheck(gpu, free, requested, tuple(earlier))
            checks.append(check)
            if not check.ok:
                problems.append(
                    Problem(
                        ("services", name),
                        f"services.{name}: vLLM would refuse to start on GPU {gpu}: at its turn "
                        f"{_mib(free)} is free ({_mib(g.vram)} - reserve {_mib(g.reserve)}"
                        + "".join(f" - {o}" for o in earlier)
                        + " - its CUDA context"
                        + (" and NCCL buffers" if sp.budget.term_or_zero("nccl") else "")
                        + "), less than --gpu-memory-utilization "
                        f"{sp.budget.utilization} x {_mib(g.vram)} = {_mib(requested)}; start "
                        "it before the services it shares the GPU with (priority), or give it "
                        "less ctx or parallel",
                    )
                )
        budget_plan = dataclasses.replace(sp.budget, start=tuple(checks))
        out[name] = dataclasses.replace(sp, budget=budget_plan)
    return out, problems


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"
