"""Checks that need the model: a service's settings against its model profile.

The spec alone cannot tell that layer 1 of GLM-5.1 is dense (it has no
experts to place), that mainline llama.cpp cannot load IQ3_KS tensors, or
that a slot's context exceeds what the model was trained for.  Pure: spec,
resolved services and loaded profiles in, problems out.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping

from layoutgen.core.placement import expert_kind, expert_layer, expert_name, loaded
from layoutgen.core.rules import Rule
from layoutgen.core.runtime import Runtime
from layoutgen.errors import Problem, Severity
from layoutgen.inputs.patterns import PatternError, compile_pattern
from layoutgen.models import quants
from layoutgen.models.profile import Profile
from layoutgen.models.tensors import Tensor, format_layers
from layoutgen.spec.roles import ResolvedService, flash_attn, flash_attn_arg
from layoutgen.spec.schema import ExpertsAuto, ExpertsExplicit, ExpertsNCpuMoe, Spec


@functools.lru_cache(maxsize=64)
def expert_layers(profile: Profile) -> frozenset[int]:
    """Layers that hold routed-expert tensors (``blk.N.ffn_{up,gate,down,gate_up}_exps``)."""
    return frozenset(
        layer for t in profile.tensors() if (layer := expert_layer(t.name)) is not None
    )


def ik_only_types(profile: Profile) -> list[str]:
    """Tensor types only ik_llama.cpp can load, sorted."""
    mainline = {q.name for q in quants.MAINLINE.values()}
    return sorted({t.type for t in profile.entries if t.type.lower() not in mainline})


def check_models(
    spec: Spec, services: tuple[ResolvedService, ...], profiles: Mapping[str, Profile]
) -> list[Problem]:
    experts_of = {mid: expert_layers(p) for mid, p in profiles.items()}
    return [
        problem
        for rs in services
        if rs.service.model in profiles
        for problem in _service(spec, rs, profiles[rs.service.model], experts_of[rs.service.model])
    ]


def _service(
    spec: Spec, rs: ResolvedService, profile: Profile, layers: frozenset[int]
) -> Iterator[Problem]:
    base, name, mid = ("services", rs.name), rs.name, rs.service.model
    runtime = spec.runtimes.get(rs.service.runtime)
    rt = runtime.rules() if runtime is not None else None
    if rt is not None and rt.MEMORY == "budget":
        yield from _budgeted(rs, rt, profile)
        return
    if rt is not None and rt.PLANNABLE and profile.format == "safetensors":
        yield Problem(
            (*base, "model"),
            f"services.{name}.model: model {mid!r} is a Hugging Face checkpoint (its profile "
            f"says format: safetensors); {rt.kind} loads GGUF files: convert it "
            "(convert_hf_to_gguf.py) and inspect the GGUF, or serve it with vllm",
        )
        return
    if rt is not None and rt.FLAVOUR == "mainline":
        ik_types = ik_only_types(profile)
        if ik_types:
            yield Problem(
                (*base, "runtime"),
                f"services.{name}.runtime: model {mid!r} has "
                f"ik_llama.cpp tensor types ({', '.join(ik_types)}) that {rt.kind} "
                "cannot load; use an ik_llama.cpp runtime",
            )
    experts, written = rs.experts, rs.origins["experts"].source == "spec"
    if isinstance(experts, ExpertsExplicit):
        for gpu, wanted in sorted(experts.layers.items()):
            missing = sorted(set(wanted) - layers)
            if missing:
                known = _spec_form(layers) or "none"
                verb = "has" if len(missing) == 1 else "have"
                yield Problem(
                    (*base, "experts", "layers", gpu),
                    f"services.{name}.experts.layers.{gpu}: {_layers(missing)} {verb} no "
                    f"routed experts in model {mid!r} (expert layers: {known})",
                )
    if isinstance(experts, ExpertsExplicit) and experts.tensors:
        yield from _expert_tensors(rs, experts, profile, rt)
    if isinstance(experts, ExpertsExplicit):
        pass
    elif isinstance(experts, ExpertsNCpuMoe) and not layers:
        yield Problem(
            (*base, "experts"),
            f"services.{name}.experts: model {mid!r} has no routed experts; remove 'experts'",
        )
    elif written and not layers and experts.mode in ("auto", "host"):
        yield Problem(
            (*base, "experts"),
            f"services.{name}.experts: model {mid!r} has no "
            f"routed experts, so 'experts: {experts.mode}' has no effect",
            Severity.WARNING,
        )
    if rt is not None and rs.service.gpu_layers is not None:
        yield from _partial_offload(rs, rt, profile)
    if rt is not None and rs.service.split_mode == "row":
        yield from _row_split(spec, rs, rt, profile, layers)
    if rt is not None and rt.PLANNABLE:
        yield from _cache_types(rs, rt, profile)
        yield from _tensor_overrides(rs, profile, rt)
        yield from _gpu_types(rs, rt, profile, layers)
    trained = profile.hparams.n_ctx_train
    if rs.service.ctx == 0 and not trained:
        yield Problem(
            (*base, "ctx"),
            f"services.{name}.ctx: 0 means the context model {mid!r} was trained for, and "
            "its profile does not say (no n_ctx_train); write the context in tokens",
        )
    per_slot = rs.service.ctx // rs.parallel
    if trained and per_slot > trained:
        yield Problem(
            (*base, "ctx"),
            f"services.{name}.ctx: {per_slot} tokens per slot exceed "
            f"the {trained} model {mid!r} was trained for; quality may drop unless "
            "the runtime extends context (RoPE scaling)",
            Severity.WARNING,
        )


def _cache_types(rs: ResolvedService, rt: Runtime, profile: Profile) -> Iterator[Problem]:
    """Cache types the runtime refuses at start-up, found before anything is sized."""
    name, k, v = rs.name, rs.cache_type_k, rs.cache_type_v
    runtime = rt.kind
    where = ("services", name, "cache_type_v")
    if rt.MLA_SAME_KV_TYPES and profile.hparams.kv_lora_rank and k != v:
        yield Problem(
            where,
            f"services.{name}.cache_type_v: {runtime} refuses different K ({k}) and V ({v}) "
            f"cache types for an MLA model ({profile.arch}); write cache_type_v: {k}",
        )
    hp = profile.hparams
    if hp.recurrent_layers and not rt.sizes_state(hp):
        yield Problem(
            ("services", name, "runtime"),
            f"services.{name}.runtime: model {rs.service.model!r} has recurrent layers that "
            "are not qwen3next-style (no ssm group count or time-step rank), whose state "
            "layoutgen cannot size on ik_llama.cpp; use a llama.cpp runtime",
        )
    yield from _cache_blocks(rs, rt, profile)
    if not flash_attn(rs, rt) and rt.v_cache_needs_flash_attn(v):
        told = flash_attn_arg(rs, rt) is not None
        why = (
            "its args turn flash attention off"
            if told
            else "it runs on the CPU alone, where layoutgen renders -fa off"
        )
        # the flags that turn it on as this build spells them (ik before 3928: a bare
        # -fa; from 3928 to 3984 it is on unless -no-fa says otherwise)
        on = rt.flash_attn_flags(True)
        spelled = ", ".join(f"'{w}'" for w in on)
        fix = (
            (f"{spelled} in args" if told else f"add {spelled} to args")
            if on
            else "remove what turns it off from args"
        )
        yield Problem(
            where,
            f"services.{name}.cache_type_v: {runtime} refuses a {v} V cache without flash "
            f"attention, and {why}; write cache_type_v: f16, or {fix}",
        )


def _cache_blocks(rs: ResolvedService, rt: Runtime, profile: Profile) -> Iterator[Problem]:
    """Each cache row the runtime allocates is a whole number of its type's blocks (a q8_0
    row holds 32 elements): else the runtime refuses the context, and nothing can be sized."""
    from layoutgen.core.kvcache import KVSettings, layer_caches
    from layoutgen.core.runtime import flag_value

    mla = flag_value(rs.service.args, "-mla", "--mla-use")
    kv = KVSettings(
        rt=rt,
        ctx=4096,  # the widths of rows do not depend on how many there are
        parallel=1,
        ubatch=512,
        cache_type_k=rs.cache_type_k,
        cache_type_v=rs.cache_type_v,
        flash_attn=flash_attn(rs, rt),
        mla=int(mla) if mla is not None and mla.isdigit() else None,
    )
    try:
        caches = layer_caches(profile.hparams, kv, arch=profile.arch)
    except (quants.UnknownType, ValueError):
        return  # an unknown type or a V cache without flash attention: said elsewhere
    said: set[str] = set()
    for cache in caches:
        for t in cache.tensors:
            key = "cache_type_v" if t.name == "v" else "cache_type_k"
            if t.ne0 % t.qtype.block_size == 0 or key in said or t.qtype.name == "f32":
                continue
            said.add(key)
            yield Problem(
                ("services", rs.name, key),
                f"services.{rs.name}.{key}: {t.qtype.name} stores rows in blocks of "
                f"{t.qtype.block_size} elements, and model {rs.service.model!r}'s "
                f"{cache.kind} cache has rows of {t.ne0} (layer {cache.layer}); write "
                f"{key}: f16, or check the profile's head sizes",
            )


def _on_gpus(rs: ResolvedService, tensor: Tensor, experts_on_gpu: frozenset[int] | None) -> bool:
    """Whether the service's settings can put ``tensor`` on one of its GPUs (matrices the
    GPU multiplies: not the embeddings, looked up on the host, nor 1-d tensors)."""
    if len(tensor.shape) < 2 or tensor.name.startswith("token_embd."):
        return False
    kind = expert_kind(tensor.name)
    if kind is None:
        return True
    return experts_on_gpu is None or kind[0] in experts_on_gpu


def partial_offload(rs: ResolvedService, rt: Runtime, profile: Profile) -> bool:
    """Whether ``gpu_layers`` leaves a layer or the output on the CPU."""
    ngl = rs.service.gpu_layers
    return ngl is not None and rt.gpu_layers(profile.hparams.n_layer, ngl) != (0, True)


def _gpu_types(
    rs: ResolvedService, rt: Runtime, profile: Profile, layers: frozenset[int]
) -> Iterator[Problem]:
    """Weights on a GPU whose type the runtime's CUDA build cannot multiply: the
    scheduler would copy each back to host RAM and run it on the CPU every batch."""
    if not rs.gpus or partial_offload(rs, rt, profile) or rs.service.tensor_overrides:
        return  # partial offload and user -ot rules: where tensors go is theirs
    experts = rs.experts
    on_gpu: frozenset[int] | None  # None: any expert layer may be on a GPU
    if isinstance(experts, ExpertsExplicit):
        on_gpu = frozenset(il for wanted in experts.layers.values() for il in wanted) | {
            layer
            for names in experts.tensors.values()
            for n in names
            if (layer := expert_layer(n)) is not None
        }
    elif isinstance(experts, ExpertsNCpuMoe):
        on_gpu = None if experts.n < len(layers) else frozenset()
    elif experts is not None and experts.mode == "host":
        on_gpu = frozenset()
    else:
        on_gpu = None
    tensors = loaded(profile, rt)
    lacking = {q for q in {t.type for t in tensors} if rt.gpu_matmul(q) is not True}
    missing: dict[str, list[str]] = {}
    for t in tensors:
        if t.type in lacking and _on_gpus(rs, t, on_gpu):
            missing.setdefault(t.type, []).append(t.name)
    for qtype, names in sorted(missing.items()):
        found = rt.gpu_matmul(qtype)
        since = found if isinstance(found, Rule) else None
        when = (
            f"its CUDA backend multiplies {qtype} since build {since.since_build} "
            f"({since.since:%Y-%m-%d}; {since.source})"
            if since
            else f"no {rt.kind} build multiplies {qtype} on a GPU (a CPU-repacked type)"
        )
        version = rt.version.text if rt.version is not None else "newest"
        yield Problem(
            ("services", rs.name, "model"),
            f"services.{rs.name}.model: {len(names)} tensor(s) of model {rs.service.model!r} "
            f"are {qtype} ({', '.join(names[:2])}{' ...' if len(names) > 2 else ''}) and "
            f"this service puts them on a GPU, but {rt.kind} {version} cannot compute them "
            f"there: {when}. The runtime would copy each back to host RAM for every batch. "
            + (
                "Keep those experts in host RAM ('experts: host' or layer lists without them), "
                if all(expert_kind(n) for n in names)
                else ""
            )
            + f"use a model without {qtype} tensors"
            + (", or a newer build" if since else ""),
            # it starts and runs, slowly (ik PR #492's log: iq1_m_r4 experts on two
            # A6000s before the kernel came), so a warning: refusing a run that starts
            # is what a plan must not do
            Severity.WARNING,
        )


def _spec_form(numbers: Iterable[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9', as a spec writes layer lists."""
    return format_layers(numbers, sep="-", join=", ")


def _layers(numbers: list[int]) -> str:
    return ("layer " if len(numbers) == 1 else "layers ") + _spec_form(numbers)


def _expert_tensors(
    rs: ResolvedService, experts: ExpertsExplicit, profile: Profile, rt: Runtime | None
) -> Iterator[Problem]:
    """Named expert tensors exist, and those one op reads together share a GPU."""
    names = {t.name for t in profile.tensors()}
    base, mid = ("services", rs.name, "experts", "tensors"), rs.service.model
    for gpu, tensors in sorted(experts.tensors.items()):
        missing = [t for t in tensors if t not in names]
        if missing:
            yield Problem(
                (*base, gpu),
                f"services.{rs.name}.experts.tensors.{gpu}: model {mid!r} has no "
                f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}",
            )
        if rt is None:
            continue
        for tensor in tensors:
            found = expert_kind(tensor)
            if found is None:
                continue
            layer, kind = found
            partners = [expert_name(layer, k) for k in sorted(rt.expert_group(kind)) if k != kind]
            lacking = [p for p in partners if p in names and p not in tensors]
            if lacking:
                yield Problem(
                    (*base, gpu),
                    f"services.{rs.name}.experts.tensors.{gpu}: {tensor} without "
                    f"{', '.join(lacking)}: {rt.kind} reads them in one op, so apart one "
                    "is copied to the other's device at every batch; list both",
                )


def _tensor_overrides(rs: ResolvedService, profile: Profile, rt: Runtime) -> Iterator[Problem]:
    """Each rule matches a tensor the runtime loads, and one that no earlier rule took."""
    rules = rs.service.tensor_overrides
    if not rules:
        return
    names = [t.name for t in loaded(profile, rt)]
    taken: set[str] = set()
    said = any(m.compute is not None for m in rs.service.measured.values())
    for i, rule in enumerate(rules):
        try:
            rx = compile_pattern(rule.pattern)
        except PatternError:
            continue  # refused, located, by layoutgen.spec.checks.patterns_check
        hits = [n for n in names if rx.search(n)]
        where = ("services", rs.name, "tensor_overrides", i, "pattern")
        label = f"services.{rs.name}.tensor_overrides[{i}].pattern"
        if not hits:
            yield Problem(
                where,
                f"{label}: '{rule.pattern}' matches none of the {len(names)} tensors "
                f"{rt.kind} loads from model {rs.service.model!r} (e.g. "
                f"{', '.join(_examples(names))}); the runtime would ignore it",
            )
        elif all(n in taken for n in hits):
            yield Problem(
                where,
                f"{label}: every tensor '{rule.pattern}' matches ({', '.join(hits[:3])}"
                f"{' ...' if len(hits) > 3 else ''}) is taken by an earlier rule (the first "
                "match wins); remove it or move it up",
                Severity.WARNING,
            )
        other = [n for n in hits if n not in taken and _layer_op(n)]
        if other and not said:
            said = True
            yield Problem(
                where,
                f"{label}: '{rule.pattern}' moves tensors other than routed experts "
                f"({', '.join(other[:3])}{' ...' if len(other) > 3 else ''}): where that "
                "splits a layer over devices, its compute buffers are bounded, not derived "
                "(on public logs such bounds fell short by up to 95 %); measure them with "
                "'layoutgen calibrate' before relying on the fit",
                Severity.WARNING,
            )
        taken.update(hits)


def _layer_op(name: str) -> bool:
    """A layer's tensor that an op reads, other than a routed expert's: moving it
    moves that op (norms, router, shared experts, attention)."""
    return name.startswith("blk.") and expert_layer(name) is None


def _examples(names: list[str]) -> list[str]:
    """A few tensor names of different kinds, to show how names are spelled."""
    seen: dict[str, str] = {}
    for n in names:
        kind = re.sub(r"\d+", "N", n)
        seen.setdefault(kind, n)
    return [*list(seen.values())[:4]]


def _row_split(
    spec: Spec, rs: ResolvedService, rt: Runtime, profile: Profile, expert_layers: frozenset[int]
) -> Iterator[Problem]:
    """-sm row as planned: matrices split by rows over two GPUs or more (ggml-cuda's
    split buffer type), every layer whole, no routed experts (ggml-cuda's mul_mat_id
    does not read a split buffer), no rpc device."""
    where = ("services", rs.name, "split_mode")
    label = f"services.{rs.name}.split_mode"
    rpc = [g.id for g in spec.host.gpus if g.id in rs.gpus and g.rpc is not None]
    if len(rs.gpus) < 2:
        yield Problem(
            where,
            f"{label}: row splits each matrix over two GPUs or more; give the service "
            "more GPUs or remove 'split_mode'",
        )
    elif rpc:
        yield Problem(
            where,
            f"{label}: row splits matrices over local CUDA GPUs only, not the rpc "
            f"device(s) {', '.join(rpc)}; write split_mode: layer",
        )
    elif not rt.splits_rows():
        yield Problem(
            where,
            f"{label}: {rt.kind} {rt.version.text if rt.version else '(newest)'} loads "
            "every layer on the main GPU with -sm row (the split buffer went to -sm "
            "graph in build 4035, PR #1022); write split_mode: layer",
        )
    elif expert_layers:
        yield Problem(
            where,
            f"{label}: model {rs.service.model!r} has routed experts: a row split of a "
            "MoE model is not planned (ggml-cuda cannot multiply expert stacks from a "
            "split buffer, mul_mat_id); write split_mode: layer",
        )
    elif partial_offload(rs, rt, profile) or rs.service.tensor_overrides:
        yield Problem(
            where,
            f"{label}: row with gpu_layers or tensor_overrides is not planned; keep "
            "every layer on the GPUs or write split_mode: layer",
        )


def _partial_offload(rs: ResolvedService, rt: Runtime, profile: Profile) -> Iterator[Problem]:
    """-ngl N that leaves a layer or the output on the CPU (below n_layer + 1 on
    llama.cpp, which counts the output as one; at or below n_layer on ik_llama.cpp,
    which does not): planned for runtimes that say so, with experts that follow
    their layers (or the host).  Above it is every layer, as -ngl 999 is."""
    n = rs.service.gpu_layers
    if n is None or not partial_offload(rs, rt, profile):
        return
    where = ("services", rs.name, "gpu_layers")
    label = f"services.{rs.name}.gpu_layers"
    if not rt.PARTIAL_OFFLOAD:
        yield Problem(
            where,
            f"{label}: {n} of model {rs.service.model!r}'s {profile.hparams.n_layer + 1} "
            f"layers (with the output) leaves some on the CPU, which is planned for llama.cpp "
            f"runtimes only ({rt.kind}'s layer split and buffers with CPU layers are not "
            "modelled yet); remove 'gpu_layers'",
        )
    if isinstance(rs.experts, ExpertsAuto | ExpertsExplicit):
        yield Problem(
            where,
            f"{label}: with layers on the CPU, experts follow their layers; write "
            f"'experts: gpu', 'host' or 'n-cpu-moe' (not '{rs.experts.mode}')",
        )


def _budgeted(rs: ResolvedService, rt: Runtime, profile: Profile) -> Iterator[Problem]:
    """A vLLM service's model: a Hugging Face checkpoint vLLM can split over its GPUs,
    whose state layoutgen can size, asked for no more context than it was trained for
    (vLLM refuses a longer --max-model-len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)."""
    from layoutgen.runtimes.vllm import gated_delta_net, tp_sizes

    base, name, mid = ("services", rs.name), rs.name, rs.service.model
    hp = profile.hparams
    if profile.format != rt.LOADS:
        yield Problem(
            (*base, "model"),
            f"services.{name}.model: model {mid!r} is a GGUF (its profile says format: "
            f"{profile.format}); vLLM's GGUF support is experimental and layoutgen does not "
            "plan it: serve the Hugging Face checkpoint (layoutgen inspect DIR writes its "
            "profile), or use a llama.cpp runtime",
        )
        return
    if hp.recurrent_layers and not gated_delta_net(hp):
        yield Problem(
            (*base, "model"),
            f"services.{name}.model: model {mid!r} has recurrent layers that are not Gated "
            "DeltaNet (no ssm group count or time-step rank), whose vLLM state layoutgen "
            "cannot size yet",
        )
    encoder = multimodal_bytes(profile)
    lm_only = "--language-model-only" in rs.service.args
    if lm_only and not rt.follows("language-model-only"):
        yield Problem(
            (*base, "args"),
            f"services.{name}.args: vLLM {rt.version.text if rt.version else ''} has no "
            "--language-model-only "
            "(from 0.17.0); write [--limit-mm-per-prompt, '{\"image\": 0}'] instead",
        )
    elif encoder and not (lm_only or text_only(rs.service.args)):
        yield Problem(
            (*base, "model"),
            f"services.{name}.model: model {mid!r} carries a multimodal encoder "
            f"({encoder / 2**20:,.0f} MiB of vision/audio tensors); vLLM's profiling run also "
            "encodes dummy images through it, which layoutgen does not size (Llama-3.2-11B-"
            "Vision: several GiB beyond its text activation), so the plan would promise KV "
            "room vLLM then takes: serve it text-only (args: ['--limit-mm-per-prompt', "
            "'{\"image\": 0}'], or '--language-model-only' from vLLM 0.17.0; the weights "
            "still load), or a text-only checkpoint",
        )
    sizes = tp_sizes(hp)
    if rs.gpus and len(rs.gpus) not in sizes:
        origin = rs.origins["gpus"]
        yield Problem(
            (*base, "gpus" if origin.source == "spec" else "role"),
            f"services.{name}.gpus: vLLM runs one tensor-parallel rank per GPU and cannot "
            f"split model {mid!r} ({_most(hp.n_head)} attention heads, "
            f"{_most(hp.n_head_kv) or _most(hp.n_head)} KV heads) over {len(rs.gpus)} GPUs; "
            f"give it {', '.join(str(n) for n in sizes if n <= 16)} GPUs",
        )
    trained = hp.n_ctx_train
    if rs.service.ctx == 0 and not trained:
        yield Problem(
            (*base, "ctx"),
            f"services.{name}.ctx: 0 means the context model {mid!r} was trained for, and "
            "its profile does not say (no n_ctx_train); write the context in tokens",
        )
    allowed = rs.service.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") in ("1", "true", "True")
    if trained and rs.service.ctx > trained and not allowed:
        yield Problem(
            (*base, "ctx"),
            f"services.{name}.ctx: {rs.service.ctx} tokens exceed the {trained} model "
            f"{mid!r} was trained for, and vLLM refuses a longer --max-model-len; write "
            f"ctx: {trained} or less (or set env VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1' with "
            "RoPE scaling in args)",
        )


#: where Hugging Face checkpoints keep a multimodal encoder and its projector
_ENCODER = re.compile(
    r"^(?:model\.)?(?:vision_model|vision_tower|visual|vision_encoder|image_encoder|"
    r"audio_tower|audio_model|multi_modal_projector|mm_projector|vision_embed_tokens)\."
)


def multimodal_bytes(profile: Profile) -> int:
    """Bytes of a checkpoint's vision/audio encoder tensors (0: a text model)."""
    return sum(t.nbytes for t in profile.tensors() if _ENCODER.match(t.name))


def text_only(args: tuple[str, ...]) -> bool:
    """``--limit-mm-per-prompt`` giving every modality 0 (JSON, or image=0,video=0)."""
    import json

    for i, a in enumerate(args):
        value = None
        if a == "--limit-mm-per-prompt" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--limit-mm-per-prompt="):
            value = a.split("=", 1)[1]
        if value is None:
            continue
        try:
            limits = json.loads(value)
        except ValueError:
            pairs = [p.split("=", 1) for p in value.split(",") if p]
            limits = {k: v for k, v in (p for p in pairs if len(p) == 2)}
        if isinstance(limits, dict) and limits:
            return all(str(v).strip() == "0" for v in limits.values())
    return False


def _most(value: int | tuple[int, ...] | None) -> int:
    if value is None:
        return 0
    return max(value) if isinstance(value, tuple) else value
