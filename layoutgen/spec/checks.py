"""Cross-checks: what the schema alone cannot see.

Every reference resolves, ports do not collide, batch sizes and thread counts
make sense, ordering has no cycles, and flags layoutgen owns are not smuggled
in through passthrough ``args``.  Pure: a validated spec in, problems (with
spec paths) out.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from layoutgen import runtimes
from layoutgen.core.runtime import Runtime
from layoutgen.errors import Problem, Severity, SpecPath
from layoutgen.inputs.patterns import refusal
from layoutgen.models.profile import Profile
from layoutgen.spec import expansions, flags
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import (
    ExpertsExplicit,
    ExpertsGpu,
    ExpertsHost,
    Host,
    Rpc,
    RuntimeKind,
    Spec,
)
from layoutgen.spec.sizes import format_size

_SECRET = "would write a secret into rendered files"


@dataclass(frozen=True)
class Owned:
    flags: tuple[str, ...]
    instead: str
    #: Why the flag is refused; most are "decided by layoutgen".
    reason: str = "is decided by layoutgen"


#: Flags whose value layoutgen decides.  Each names the spec key to use.
OWNED: tuple[Owned, ...] = (
    Owned(("-m", "--model"), "set the model under 'models:' and 'model:'"),
    Owned(("-c", "--ctx-size"), "use 'ctx:'"),
    Owned(("-np", "--parallel"), "use 'parallel:'"),
    Owned(("-ctk", "--cache-type-k"), "use 'cache_type_k:'"),
    Owned(("-ctv", "--cache-type-v"), "use 'cache_type_v:'"),
    Owned(
        ("-ngl", "--gpu-layers", "--n-gpu-layers"),
        "use 'gpus:' and 'gpu_layers:' (layoutgen computes -ngl from the plan)",
    ),
    Owned(
        ("-ot", "--override-tensor"),
        "use 'experts:', or 'tensor_overrides: [{pattern: REGEX, device: host|GPU id}]' "
        "for rules of your own (the plan must know where each tensor goes)",
    ),
    Owned(("-cmoe", "--cpu-moe"), "use 'experts: host'"),
    Owned(("-ncmoe", "--n-cpu-moe"), "use 'experts: {mode: n-cpu-moe, n: N}'"),
    Owned(("-b", "--batch-size"), "use 'batch:'"),
    Owned(("-ub", "--ubatch-size"), "use 'ubatch:'"),
    Owned(("-t", "--threads"), "use 'threads:'"),
    Owned(("-tb", "--threads-batch"), "use 'threads_batch:'"),
    Owned(("--host",), "services bind 127.0.0.1; use 'expose: true' to listen on all interfaces"),
    Owned(("--port",), "use 'port:'"),
    Owned(("--mlock",), "use 'mlock: true'"),
    Owned(
        ("-ts", "--tensor-split", "-dev", "--device", "-mg", "--main-gpu"),
        "use 'gpus:' (layoutgen splits layers across the service's GPUs)",
    ),
    Owned(("-fit", "--fit"), "layoutgen pins placement itself and renders '-fit off'"),
    Owned(("--reasoning-budget",), "use 'reasoning: false' (or true)"),
    Owned(
        ("--api-key",),
        "use 'api_key: {secret: NAME}' (a podman secret) or 'api_key: {file: /path}'",
        reason=_SECRET,
    ),
    Owned(("--api-key-file",), "use 'api_key: {file: /path}' (mounted into the container)"),
    Owned(
        ("--lora", "--lora-scaled", "--lora-init-without-apply"),
        "use 'lora: {adapters: [{name, path}]}' (the plan budgets the adapter's tensors)",
    ),
)
KINDS: tuple[RuntimeKind, ...] = ("llama.cpp", "ik_llama.cpp")
ALL_KINDS: tuple[RuntimeKind, ...] = (*KINDS, "vllm")
_OWNED_BY_FLAG = {flag: owned for owned in OWNED for flag in owned.flags}


def check(spec: Spec, services: tuple[ResolvedService, ...]) -> list[Problem]:
    return [
        *_host(spec),
        *_references(spec, services),
        *_ports(spec),
        *_sizes(spec, services),
        *_experts(spec, services),
        *_args(spec),
        *flags.check(spec, services, _owned),
        *expansions.check(spec),
        *_api_keys(spec),
        *_ordering(spec),
        *_moving_tags(spec),
        *_unspeakable(spec, services),
        *_gpu_layers(spec, services),
        *_tensor_split(spec, services),
        *_tensor_overrides(spec, services),
        *patterns_check(spec),
        *_runtime_keys(spec, services),
        *_budgeted(spec, services),
        *_lora(spec, services),
        *_speculative(spec, services),
        *_draft(spec, services),
        *_numa(spec),
        *_defaults(spec),
        *_unit_names(spec),
    ]


def _numa(spec: Spec) -> Iterator[Problem]:
    """A service's NUMA nodes must be the host's (host.cpu.numa_nodes, else one a
    socket), numbered from 0 as the kernel numbers them."""
    nodes = spec.host.cpu.nodes
    for name, svc in sorted(spec.services.items()):
        if svc.numa is None or svc.numa.nodes is None:
            continue
        missing = sorted(n for n in svc.numa.nodes if n >= nodes)
        if missing:
            yield Problem(
                ("services", name, "numa", "nodes"),
                f"services.{name}.numa.nodes: node {', '.join(map(str, missing))} is not on "
                f"the host, which has {nodes} NUMA node{'s' if nodes != 1 else ''} "
                f"(0-{nodes - 1}; host.cpu.numa_nodes, else one a socket)",
            )


def _unit_names(spec: Spec) -> Iterator[Problem]:
    """A service named like a unit layoutgen generates for another one (its schedule's
    ``-start``/``-stop`` one-shots, a LoRA update's ``-lora-<adapter>``) would share
    that unit's file: refused at the service that brings the generated unit."""
    generated: dict[str, SpecPath] = {}
    for name, svc in sorted(spec.services.items()):
        if svc.schedule is not None:
            generated[f"{name}-start"] = ("services", name, "schedule")
            generated[f"{name}-stop"] = ("services", name, "schedule")
        for i, adapter in enumerate(() if svc.lora is None else svc.lora.adapters):
            if adapter.update is not None:
                generated[f"{name}-lora-{adapter.name}"] = (
                    "services",
                    name,
                    "lora",
                    "adapters",
                    i,
                    "update",
                )
    for unit, where in sorted(generated.items()):
        if unit in spec.services:
            yield Problem(
                where,
                f"{'.'.join(str(p) for p in where)}: brings the unit {unit}.service, and "
                f"service {unit!r} has that name too; rename one of them",
            )


def _kind(spec: Spec, rs: ResolvedService) -> Runtime | None:
    runtime = spec.runtimes.get(rs.service.runtime)
    return None if runtime is None else runtime.rules()


def _places_tensors(spec: Spec, rs: ResolvedService) -> bool:
    """Whether the service's runtime places tensors (llama.cpp, ik_llama.cpp); an
    unknown runtime counts as one (its own error is reported at 'runtime')."""
    rt = _kind(spec, rs)
    return rt is None or rt.MEMORY == "tensors"


def _runtime_keys(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """Keys only some runtimes read, written for one that does not: refused, with the
    key that means the same on this runtime, if any."""
    every = frozenset().union(*(runtimes.get(k).SERVICE_KEYS for k in ALL_KINDS))
    for rs in services:
        rt = _kind(spec, rs)
        if rt is None:
            continue
        for key in sorted(every - rt.SERVICE_KEYS):
            if key not in rs.service.model_fields_set:
                continue
            owners = [k for k in ALL_KINDS if key in runtimes.get(k).SERVICE_KEYS]
            instead = rt.INSTEAD.get(key, "remove it")
            yield Problem(
                ("services", rs.name, key),
                f"services.{rs.name}.{key}: {rt.kind} has no {key} (a {' and '.join(owners)} "
                f"setting); {instead}",
                at_key=True,
            )


def _budgeted(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """A budgeted (vLLM) service runs on GPUs, with at least as many batched tokens
    as sequences (vLLM refuses max_num_batched_tokens < max_num_seqs)."""
    for rs in services:
        if _places_tensors(spec, rs):
            continue
        base = ("services", rs.name)
        if rs.service.flash_attn is not None:
            yield Problem(
                (*base, "flash_attn"),
                f"services.{rs.name}.flash_attn: vLLM picks its attention backend itself "
                "(VLLM_ATTENTION_BACKEND in 'env:'); remove 'flash_attn:'",
            )
        if not rs.gpus:
            origin = rs.origins["gpus"]
            yield Problem(
                (*base, "gpus" if origin.source == "spec" else "role"),
                f"services.{rs.name}: a vllm service needs GPUs (its gpus are empty, from the "
                f"{origin.source}); list them in 'gpus:'",
            )
        # (batch below max_num_seqs, which vLLM refuses, is checked where max_num_seqs is
        # resolved: parallel is the full-length requests the KV holds, not a flag)


#: vLLM's default --max-lora-rank (vllm/config/lora.py:33 of 0.11.0)
DEFAULT_LORA_RANK = 16
#: set by layoutgen when an adapter is updated through vLLM's runtime endpoint
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def lora_base(spec: Spec, rs: ResolvedService) -> str:
    """The base model an adapter must name: ``lora.base_model``, else the name of the
    model's checkpoint directory (vLLM) or GGUF file (llama.cpp)."""
    lora = rs.service.lora
    if lora is not None and lora.base_model is not None:
        return lora.base_model
    model = spec.models.get(rs.service.model)
    return "" if model is None else PurePosixPath(model.path).name


def same_base(named: str, expected: str) -> bool:
    """``base_model_name_or_path`` names ``expected``: equal, or the same last path
    component (``Qwen/Qwen3-32B`` and ``/srv/models/Qwen3-32B/`` both name
    ``Qwen3-32B``).  The update script applies the same rule."""
    last = named.rstrip("/").rpartition("/")[2]
    return named == expected or last == expected.rstrip("/").rpartition("/")[2]


def _lora(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """Adapters: rank and base model where the spec gives them; what each runtime takes."""
    for rs in services:
        lora, rt = rs.service.lora, _kind(spec, rs)
        base = ("services", rs.name, "lora")
        if rt is not None and RUNTIME_LORA_ENV in rs.service.env:
            yield Problem(
                ("services", rs.name, "env", RUNTIME_LORA_ENV),
                f"services.{rs.name}.env.{RUNTIME_LORA_ENV}: set by layoutgen when an "
                "adapter has 'update: {apply: load}'; remove it",
                at_key=True,
            )
        if lora is None or rt is None:
            continue
        budgeted = rt.MEMORY == "budget"
        if not budgeted:
            for key in ("max_loras", "max_lora_rank", "max_cpu_loras"):
                if key in lora.model_fields_set:
                    yield Problem(
                        (*base, key),
                        f"services.{rs.name}.lora.{key}: {rt.kind} loads every listed "
                        "adapter whole and has no slots; remove it",
                        at_key=True,
                    )
        limit = lora.max_lora_rank or DEFAULT_LORA_RANK
        expected = lora_base(spec, rs)
        for i, adapter in enumerate(lora.adapters):
            where = (*base, "adapters", i)
            label = f"services.{rs.name}.lora.adapters[{i}]"
            if budgeted and adapter.rank is not None and adapter.rank > limit:
                yield Problem(
                    (*where, "rank"),
                    f"{label}.rank: adapter {adapter.name!r} has rank {adapter.rank}, above "
                    f"max_lora_rank {limit}, and vLLM refuses to load it; write max_lora_rank: "
                    f"{_rank_for(adapter.rank)} (under lora:) or train it at rank {limit} or less",
                )
            if adapter.base_model is not None and not same_base(adapter.base_model, expected):
                yield Problem(
                    (*where, "base_model"),
                    f"{label}.base_model: adapter {adapter.name!r} was trained on "
                    f"{adapter.base_model!r}, not on this service's model {expected!r}; "
                    "serve it with that model, or set lora.base_model if both name the same",
                )
            for key in ("scale", "size") if budgeted else ("update",):
                if key in adapter.model_fields_set:
                    why = (
                        "is a llama.cpp setting (vLLM applies adapters per request)"
                        if budgeted
                        else "needs vLLM: llama-server's /lora-adapters only sets the scale "
                        "of adapters loaded at start (server-common.cpp parse_lora_request)"
                    )
                    yield Problem(
                        (*where, key),
                        f"{label}.{key}: {key} {why}; remove it",
                        at_key=True,
                    )


def _rank_for(rank: int) -> int:
    from layoutgen.spec.schema import LORA_RANKS

    return next((r for r in LORA_RANKS if r >= rank), LORA_RANKS[-1])


def _speculative(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """vLLM 0.11.0's V1 engine proposes with ngram, eagle/eagle3/mtp or medusa only:
    ``vllm/v1/worker/gpu_model_runner.py:280-294`` raises "Unknown speculative
    decoding method" for ``draft_model``."""
    for rs in services:
        sp = rs.service.speculative
        if sp is None or sp.method != "draft":
            continue
        yield Problem(
            ("services", rs.name, "speculative", "method"),
            f"services.{rs.name}.speculative.method: vLLM's V1 engine has no draft-model "
            "proposer (0.11.0 gpu_model_runner.py: ngram, eagle, eagle3, mtp and medusa "
            "only) and refuses to start; use method: mtp with a checkpoint that keeps its "
            "MTP layers",
        )


def _draft(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """A draft model (llama.cpp): a model of the spec other than the service's own, on
    GPUs the service holds (the container sees no others), local ones (an rpc
    device's name for ``-devd`` is not verified), with cache types the runtime has."""
    for rs in services:
        draft, rt = rs.service.draft, _kind(spec, rs)
        if draft is None or rt is None or "draft" not in rt.SERVICE_KEYS:
            continue  # other runtimes: _runtime_keys refuses the key
        at = ("services", rs.name, "draft")
        where = f"services.{rs.name}.draft"
        if draft.model not in spec.models:
            yield Problem(
                (*at, "model"),
                f"{where}.model: no model {draft.model!r} under 'models:'"
                f"{_known(sorted(spec.models), draft.model)}",
            )
        elif draft.model == rs.service.model:
            yield Problem(
                (*at, "model"),
                f"{where}.model: {draft.model!r} is the service's own model; a draft is a "
                "smaller model with the same vocabulary",
            )
        rpc = {g.id for g in spec.host.gpus if g.rpc is not None}
        for i, gpu in enumerate(draft.gpus or ()):
            if gpu not in rs.gpus:
                yield Problem(
                    (*at, "gpus", i),
                    f"{where}.gpus: {gpu!r} is not one of the service's GPUs "
                    f"({', '.join(rs.gpus) or 'none'}); the draft runs in the same process",
                )
            elif gpu in rpc:
                yield Problem(
                    (*at, "gpus", i),
                    f"{where}.gpus: {gpu!r} is an rpc device; a draft model on rpc devices "
                    "is not verified: name local GPUs",
                )
        if draft.gpus is None and not rs.gpus:
            yield Problem(
                (*at,),
                f"{where}: the service has no GPUs; layoutgen plans a draft model with "
                "every layer on GPUs (-ngld)",
                at_key=True,
            )
        elif draft.gpus is None and any(g in rpc for g in rs.gpus):
            yield Problem(
                (*at,),
                f"{where}: the service holds rpc devices; a draft model on rpc devices is "
                "not verified: write 'gpus:' with its local GPUs",
                at_key=True,
            )
        elif draft.gpus == ():
            yield Problem(
                (*at, "gpus"),
                f"{where}.gpus: empty; layoutgen plans a draft model with every layer on "
                "GPUs: name at least one of the service's",
            )
        for key in ("cache_type_k", "cache_type_v"):
            value = getattr(draft, key)
            if rt.MEMORY == "tensors" and value is not None and value not in rt.CACHE_TYPES:
                yield Problem(
                    (*at, key),
                    f"{where}.{key}: {rt.kind} has no {value} cache",
                )


#: llama.cpp 11434 common/speculative.cpp:30 (SPEC_VOCAB_MAX_SIZE_DIFFERENCE): a draft
#: whose vocabulary is larger or smaller by more is refused (lines 141-151)
DRAFT_VOCAB_DIFFERENCE = 128


def check_drafts(
    spec: Spec, services: tuple[ResolvedService, ...], profiles: Mapping[str, Profile]
) -> Iterator[Problem]:
    """A draft model's profile: a GGUF one (llama.cpp loads GGUF files), with a
    vocabulary llama.cpp accepts beside the target's.

    ``common_speculative_are_compatible`` (common/speculative.cpp:106-169 of
    11434) refuses a draft whose vocabulary type, BOS or EOS differ, whose
    token count differs by more than 128, or whose token texts differ from id 5
    on; the server then fails to start ("the target and draft vocabs are not
    compatible", line 287).  A profile records the token count only: that part
    is checked here, the rest at start-up.
    """
    for rs in services:
        draft = rs.service.draft
        if draft is None or draft.model not in profiles:
            continue
        where, at = f"services.{rs.name}.draft.model", ("services", rs.name, "draft", "model")
        profile = profiles[draft.model]
        if profile.format != "gguf":
            yield Problem(
                at,
                f"{where}: model {draft.model!r} is a Hugging Face checkpoint (its profile "
                "says format: safetensors); llama.cpp loads a GGUF draft: convert it and "
                "inspect the GGUF",
            )
            continue
        target = profiles.get(rs.service.model)
        mine, theirs = profile.hparams.vocab, None if target is None else target.hparams.vocab
        if mine is not None and theirs is not None and abs(mine - theirs) > DRAFT_VOCAB_DIFFERENCE:
            yield Problem(
                at,
                f"{where}: model {draft.model!r} has {mine:,} tokens, the service's model "
                f"{rs.service.model!r} {theirs:,}; llama.cpp refuses a draft whose vocabulary "
                f"differs by more than {DRAFT_VOCAB_DIFFERENCE} tokens "
                "(common/speculative.cpp common_speculative_are_compatible): use a draft "
                "of the same model family",
            )


def _defaults(spec: Spec) -> Iterator[Problem]:
    """``default: true`` marks the one of a set of alternatives (services that conflict)
    started at boot: it needs conflicts, and two defaults may not conflict."""
    clash = conflicting(spec)
    for name in sorted(spec.services):
        if spec.services[name].default is None:
            continue
        where = ("services", name, "default")
        if not clash[name]:
            yield Problem(
                where,
                f"services.{name}.default: {name!r} conflicts with no service, so it has no "
                "alternative to be the default of; list its alternatives under 'conflicts:' "
                "or remove 'default'",
            )
        both = sorted(o for o in clash[name] if spec.services[o].default and o < name)
        if spec.services[name].default and both:
            yield Problem(
                where,
                f"services.{name}.default: {both[0]!r} is the default too, and the two "
                "conflict: only one of them can start at boot; remove one 'default: true'",
            )


def _tensor_overrides(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """Each rule's device is the host or one of the service's GPUs, on a runtime that
    layoutgen plans (the profile checks, later, that each rule matches a tensor)."""
    for rs in services:
        if not _places_tensors(spec, rs):
            continue  # refused whole by _runtime_keys
        rules = rs.service.tensor_overrides
        runtime = spec.runtimes.get(rs.service.runtime)
        if rules and runtime is not None and not runtime.rules().PLANNABLE:
            yield Problem(
                ("services", rs.name, "tensor_overrides"),
                f"services.{rs.name}.tensor_overrides: {runtime.kind} has no -ot; remove them",
            )
        for i, rule in enumerate(rules):
            if rule.device != "host" and rule.device not in rs.gpus:
                yield Problem(
                    ("services", rs.name, "tensor_overrides", i, "device"),
                    f"services.{rs.name}.tensor_overrides[{i}].device: {rule.device!r} is "
                    f"neither 'host' nor one of this service's GPUs "
                    f"({', '.join(rs.gpus) or 'none'})",
                )


def _tensor_split(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """-ts shares: one for every GPU of the service and none other, not all zero."""
    for rs in services:
        split = rs.service.tensor_split
        if not _places_tensors(spec, rs):
            continue
        if split is None:
            continue
        where = ("services", rs.name, "tensor_split")
        for gpu in sorted(set(split) - set(rs.gpus)):
            yield Problem(
                (*where, gpu),
                f"services.{rs.name}.tensor_split.{gpu}: {gpu!r} is not one of this service's "
                f"GPUs ({', '.join(rs.gpus) or 'none'})",
                at_key=True,
            )
        missing = [g for g in rs.gpus if g not in split]
        if missing:
            yield Problem(
                where,
                f"services.{rs.name}.tensor_split: no share for {', '.join(missing)}; give "
                "every GPU of the service a share (0 keeps a GPU's layers off it)",
            )
        if not any(v > 0 for v in split.values()):
            yield Problem(
                where, f"services.{rs.name}.tensor_split: every share is 0; give one a share"
            )


def _gpu_layers(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """-ngl N needs GPUs; whether N is partial (and then allowed) the profile says
    (layoutgen.spec.model_checks)."""
    for rs in services:
        if rs.service.gpu_layers is None or rs.gpus or not _places_tensors(spec, rs):
            continue
        yield Problem(
            ("services", rs.name, "gpu_layers"),
            f"services.{rs.name}.gpu_layers: the service has no GPUs; remove "
            "'gpu_layers' or give it 'gpus:'",
        )


def _unspeakable(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    """Settings the runtime's build has no flag for: said, not silently dropped."""
    for rs in services:
        runtime = spec.runtimes.get(rs.service.runtime)
        if runtime is None or not runtime.rules().PLANNABLE or not _places_tensors(spec, rs):
            continue
        if rs.reasoning is False and not runtime.rules().reasoning_off():
            origin = rs.origins["reasoning"]
            yield Problem(
                ("services", rs.name, "reasoning" if origin.source == "spec" else "role"),
                f"services.{rs.name}: reasoning is off (from the {origin.source}), but "
                f"{runtime.kind} build {runtime.version} has no flag to turn it off (ik "
                "--reasoning-budget came with build 3870): the model will think; use a "
                "newer build or write 'reasoning: true'",
                Severity.WARNING,
            )


def _moving_tags(spec: Spec) -> Iterator[Problem]:
    """An image tagged ``:latest`` (or untagged, which means it) changes under the plan.

    The plan follows the rules of one build (``version:``, or the newest
    layoutgen knows); a moving tag pulls whatever build is newest on the day
    the unit starts, whose placement and buffers may differ.
    """
    for rid, runtime in sorted(spec.runtimes.items()):
        image = runtime.image
        if image is None or "@" in image:
            continue  # a native binary, or pinned by digest
        tag = image.rpartition("/")[2].partition(":")[2]
        if tag not in ("", "latest"):
            continue
        moving = "tag ':latest'" if tag else "an untagged image (':latest')"
        rt = runtime.rules()
        if runtime.version is not None:
            assumed = f"build {runtime.version}'s rules ('version:')"
            pin = "pin the image to that build's tag or digest"
        elif rt.MEMORY == "budget":  # vLLM: planned by the newest release's rules alone
            assumed = f"the newest release layoutgen knows ({rt.READ_FROM}), as no 'version:' says"
            pin = "pin the image to a release's tag or digest and write it as 'version:'"
        else:
            assumed = (
                f"every build up to the newest layoutgen knows ({rt.READ_FROM}), as no "
                "'version:' says"
            )
            pin = "pin the image to a build's tag or digest and write that build as 'version:'"
        yield Problem(
            ("runtimes", rid, "image"),
            f"runtimes.{rid}.image: {moving} moves, but the plan follows {assumed}; "
            f"{pin}, so a pull cannot change the placement under the plan",
            Severity.WARNING,
        )


def _host(spec: Spec) -> Iterator[Problem]:
    host = spec.host
    if host.ram_reserve >= host.ram:
        yield Problem(
            ("host", "ram_reserve"),
            f"host.ram_reserve: "
            f"{format_size(host.ram_reserve)} must be smaller than host.ram "
            f"({format_size(host.ram)})",
        )
    seen_ids: dict[str, int] = {}
    seen_index: dict[int, int] = {}
    seen_uuid: dict[str, int] = {}
    seen_endpoints: dict[str, int] = {}
    for i, gpu in enumerate(host.gpus):
        if gpu.id in seen_ids:
            yield Problem(
                ("host", "gpus", i, "id"),
                f"host.gpus[{i}].id: GPU id {gpu.id!r} is already used by "
                f"host.gpus[{seen_ids[gpu.id]}]; give each GPU its own id",
            )
        seen_ids.setdefault(gpu.id, i)
        if gpu.index is not None:
            if gpu.index in seen_index:
                yield Problem(
                    ("host", "gpus", i, "index"),
                    f"host.gpus[{i}].index: index {gpu.index} is already used by "
                    f"host.gpus[{seen_index[gpu.index]}]; each physical GPU appears once",
                )
            seen_index.setdefault(gpu.index, i)
        if gpu.uuid is not None:
            if gpu.uuid in seen_uuid:
                yield Problem(
                    ("host", "gpus", i, "uuid"),
                    f"host.gpus[{i}].uuid: {gpu.uuid} is already host.gpus[{seen_uuid[gpu.uuid]}]"
                    "; each physical GPU appears once",
                )
            seen_uuid.setdefault(gpu.uuid, i)
        if gpu.rpc is not None:
            yield from _rpc(host, i, gpu.rpc, seen_endpoints)
        if gpu.reserve >= gpu.vram:
            yield Problem(
                ("host", "gpus", i, "reserve"),
                f"host.gpus[{i}].reserve: "
                f"{format_size(gpu.reserve)} must be smaller than the GPU's vram "
                f"({format_size(gpu.vram)})",
            )


#: addresses that keep a listener on this machine
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _public(address: str) -> bool:
    """Whether ADDRESS is an IP literal outside the private, link-local and loopback
    ranges (a host name: not known, False)."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    return ip.is_global


def _rpc(host: Host, i: int, rpc: Rpc, seen: dict[str, int]) -> Iterator[Problem]:
    """An rpc device: one per endpoint, an absolute binary, and a warning off loopback."""
    where = ("host", "gpus", i, "rpc")
    if rpc.endpoint in seen:
        yield Problem(
            (*where, "endpoint"),
            f"host.gpus[{i}].rpc.endpoint: {rpc.endpoint} is already used by "
            f"host.gpus[{seen[rpc.endpoint]}]; each ggml-rpc-server serves one device here",
        )
    seen.setdefault(rpc.endpoint, i)
    address = rpc.endpoint.rpartition(":")[0]
    public = _public(address)
    if rpc.private_link and public:
        yield Problem(
            (*where, "private_link"),
            f"host.gpus[{i}].rpc.private_link: {address} is a public address, which no "
            "private link has; use the address of the link between the two hosts",
        )
    elif address not in LOOPBACK and not rpc.private_link:
        yield Problem(
            (*where, "endpoint"),
            f"host.gpus[{i}].rpc.endpoint: ggml-rpc-server listens on {address}, beyond "
            "this machine; its protocol has no authentication and must never face an open "
            "network: use 127.0.0.1, or a private link only the client can reach",
            Severity.WARNING,
        )
    if rpc.served_by is not None and rpc.served_by != host.name and address in LOOPBACK:
        yield Problem(
            (*where, "endpoint"),
            f"host.gpus[{i}].rpc.endpoint: {address} on {rpc.served_by!r} is not reachable "
            f"from {host.name!r}; write the address {rpc.served_by!r} listens on for this host",
        )


def _references(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    gpu_ids = [g.id for g in spec.host.gpus]
    for rs in services:
        svc, name = rs.service, rs.name
        base = ("services", name)
        if svc.model not in spec.models:
            yield Problem(
                (*base, "model"),
                f"services.{name}.model: no model {svc.model!r} "
                f"under 'models:'{_known(list(spec.models), svc.model)}",
            )
        if svc.runtime not in spec.runtimes:
            yield Problem(
                (*base, "runtime"),
                f"services.{name}.runtime: no runtime "
                f"{svc.runtime!r} under 'runtimes:'{_known(list(spec.runtimes), svc.runtime)}",
            )
        else:
            runtime = spec.runtimes[svc.runtime]
            rt = runtime.rules()
            if not rt.PLANNABLE:
                yield Problem(
                    (*base, "runtime"),
                    f"services.{name}.runtime: {rt.kind} services "
                    "cannot be planned yet; use a llama.cpp or ik_llama.cpp runtime",
                )
            for key in ("cache_type_k", "cache_type_v"):
                value = getattr(rs, key)
                if rt.PLANNABLE and rt.MEMORY == "tensors" and value not in rt.CACHE_TYPES:
                    has = [k for k in KINDS if value in runtimes.get(k).CACHE_TYPES]
                    yield Problem(
                        (*base, key),
                        f"services.{name}.{key}: {rt.kind} has no {value} cache"
                        + (f" ({' and '.join(has)} has)" if has else "")
                        + f"; write one of {', '.join(sorted(rt.CACHE_TYPES))}",
                    )
        seen: set[str] = set()
        for i, gpu in enumerate(svc.gpus or ()):
            if gpu not in gpu_ids:
                yield Problem(
                    (*base, "gpus", i),
                    f"services.{name}.gpus[{i}]: no GPU {gpu!r} "
                    f"under host.gpus{_known(gpu_ids, gpu)}",
                )
            if gpu in seen:
                yield Problem(
                    (*base, "gpus", i), f"services.{name}.gpus[{i}]: GPU {gpu!r} is listed twice"
                )
            seen.add(gpu)
        yield from _rpc_users(spec, rs)


def _rpc_users(spec: Spec, rs: ResolvedService) -> Iterator[Problem]:
    """rpc devices only for native llama.cpp services (or containers reaching another host).

    Checked on the resolved GPUs: a service without ``gpus:`` gets every GPU
    of the host from its role, rpc devices included.
    """
    runtime = spec.runtimes.get(rs.service.runtime)
    if runtime is None:
        return
    listed = rs.service.gpus
    for gpu in spec.host.gpus:
        if gpu.rpc is None or gpu.id not in rs.gpus:
            continue
        if listed:
            i = listed.index(gpu.id)
            where: tuple[str | int, ...] = ("services", rs.name, "gpus", i)
            label, hint = f"services.{rs.name}.gpus[{i}]", ""
        else:
            where = ("services", rs.name, "runtime")
            label = f"services.{rs.name}"
            hint = " (a service without 'gpus:' uses every GPU of the host)"
        if not runtime.rules().RPC_DEVICES:
            yield Problem(
                where,
                f"{label}: {gpu.id!r} is an rpc device; layoutgen plans rpc devices for "
                f"llama.cpp runtimes only (their buffer names are checked against llama.cpp "
                f"itself); list this service's GPUs without it{hint}",
            )
        elif runtime.image is not None and gpu.rpc.endpoint.rpartition(":")[0] in LOOPBACK:
            yield Problem(
                where,
                f"{label}: {gpu.id!r} is an rpc device on the host's loopback, which a "
                "container cannot reach (it has its own); run this service from a native "
                f"runtime ('binary:'){hint}",
            )


def _ports(spec: Spec) -> Iterator[Problem]:
    owner: dict[int, str] = {}
    for name in sorted(spec.services):
        svc = spec.services[name]
        if svc.port in owner:
            yield Problem(
                ("services", name, "port"),
                f"services.{name}.port: port {svc.port} is already used by service "
                f"{owner[svc.port]!r}; ports must be unique on host "
                f"{spec.host.name!r}",
            )
        else:
            owner[svc.port] = name
        if svc.expose:
            yield Problem(
                ("services", name, "expose"),
                f"services.{name}.expose: listens on 0.0.0.0 (all interfaces); "
                "llama.cpp servers have no authentication by default, keep this "
                "behind a firewall or remove 'expose'",
                Severity.WARNING,
            )


def _sizes(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    threads = spec.host.cpu.threads
    for rs in services:
        base, name = ("services", rs.name), rs.name
        rt = _kind(spec, rs)
        if rt is not None and rt.MEMORY == "budget":
            continue  # ctx is one request's length; no ubatch or threads (_runtime_keys)
        if rs.ubatch > rs.batch:
            key = "ubatch" if "ubatch" in rs.service.model_fields_set else "batch"
            yield Problem(
                (*base, key),
                f"services.{name}.{key}: ubatch ({rs.ubatch}) cannot "
                f"exceed batch ({rs.batch}); llama.cpp would clamp it. Write "
                f"ubatch: {rs.batch} or batch: {rs.ubatch}",
            )
        if rs.service.ctx % rs.parallel:
            ctx, n = rs.service.ctx, rs.parallel
            lower, upper = ctx - ctx % n, ctx - ctx % n + n
            yield Problem(
                (*base, "ctx"),
                f"services.{name}.ctx: {ctx} tokens do not divide "
                f"evenly over parallel {n} slots; write ctx: {lower} or ctx: {upper}",
            )
        for key in ("threads", "threads_batch"):
            value = getattr(rs, key)
            if value is not None and value > threads:
                yield Problem(
                    (*base, key),
                    f"services.{name}.{key}: {value} exceeds the "
                    f"host's {threads} hardware threads (host.cpu.threads)",
                )


def _experts(spec: Spec, services: tuple[ResolvedService, ...]) -> Iterator[Problem]:
    for rs in services:
        if not _places_tensors(spec, rs):
            continue  # a budgeted runtime keeps every expert on its GPUs
        base, name, experts = ("services", rs.name), rs.name, rs.experts
        if not rs.gpus and not isinstance(experts, ExpertsHost | ExpertsGpu):
            yield Problem(
                (*base, "experts"),
                f"services.{name}.experts: mode "
                f"'{experts.mode}' places experts on GPUs, but this service has no "
                "GPUs; write 'experts: host' or give it 'gpus:'",
            )
        if not isinstance(experts, ExpertsExplicit):
            continue
        owner: dict[int, str] = {}
        for gpu, layers in experts.layers.items():
            if gpu not in rs.gpus:
                yield Problem(
                    (*base, "experts", "layers", gpu),
                    f"services.{name}.experts."
                    f"layers.{gpu}: GPU {gpu!r} is not one of this service's GPUs "
                    f"({', '.join(rs.gpus) or 'none'})",
                    at_key=True,
                )
            for layer in layers:
                if layer in owner and owner[layer] != gpu:
                    yield Problem(
                        (*base, "experts", "layers", gpu),
                        f"services.{name}.experts."
                        f"layers.{gpu}: layer {layer} is also placed on "
                        f"{owner[layer]!r}; a layer's experts go to one GPU",
                    )
                owner.setdefault(layer, gpu)
        for gpu in experts.tensors:
            if gpu not in rs.gpus:
                yield Problem(
                    (*base, "experts", "tensors", gpu),
                    f"services.{name}.experts.tensors.{gpu}: GPU {gpu!r} is not one of this "
                    f"service's GPUs ({', '.join(rs.gpus) or 'none'})",
                    at_key=True,
                )
        seen: dict[str, str] = {}
        for gpu, names in experts.tensors.items():
            for tensor in names:
                layer = int(tensor.split(".")[1])
                if layer in owner:
                    yield Problem(
                        (*base, "experts", "tensors", gpu),
                        f"services.{name}.experts.tensors.{gpu}: {tensor} is in layer {layer}, "
                        f"whose experts 'layers' already puts on {owner[layer]!r}; list the "
                        "layer or its tensors, not both",
                    )
                elif tensor in seen and seen[tensor] != gpu:
                    yield Problem(
                        (*base, "experts", "tensors", gpu),
                        f"services.{name}.experts.tensors.{gpu}: {tensor} is also placed on "
                        f"{seen[tensor]!r}; a tensor lives on one GPU",
                    )
                seen.setdefault(tensor, gpu)


def _api_keys(spec: Spec) -> Iterator[Problem]:
    for name in sorted(spec.services):
        svc = spec.services[name]
        key, runtime = svc.api_key, spec.runtimes.get(svc.runtime)
        if key is None or runtime is None:
            continue
        base = ("services", name, "api_key")
        if key.secret is not None and runtime.image is None:
            yield Problem(
                (*base, "secret"),
                f"services.{name}.api_key.secret: podman secrets "
                "need a container runtime; use 'file:' for a native server",
            )
        rt = runtime.rules()
        if rt.API_KEY_ENV is not None and key.secret is None:
            which = "file" if key.file is not None else "env_file"
            yield Problem(
                (*base, which),
                f"services.{name}.api_key.{which}: {rt.kind} reads its key from "
                f"{rt.API_KEY_ENV} and has no key file; use 'secret:' (a podman secret, "
                f"passed as {rt.API_KEY_ENV})",
            )
            continue
        if key.env_file is not None and not runtime.rules().READS_API_KEY_ENV:
            yield Problem(
                (*base, "env_file"),
                f"services.{name}.api_key.env_file: "
                f"{runtime.kind} does not read LLAMA_API_KEY; use 'file:' or 'secret:'",
            )


def _owned(spec: Spec, name: str) -> dict[str, Owned]:
    """The flags layoutgen decides for this service's runtime, by flag."""
    runtime = spec.runtimes.get(spec.services[name].runtime)
    table = None if runtime is None else runtime.rules().OWNED_FLAGS
    if table is None:
        return _OWNED_BY_FLAG
    own = (
        Owned(("--api-key",), "use 'api_key: {secret: NAME}' (a podman secret)", _SECRET),
        *(Owned(flags, instead) for flags, instead in table),
    )
    return {flag: o for o in own for flag in o.flags}


#: flash attention's flags, which 'flash_attn:' renders in the build's form
_FA_FLAGS = frozenset({"-fa", "--flash-attn", "-no-fa", "--no-flash-attn"})


def _args(spec: Spec) -> Iterator[Problem]:
    for name in sorted(spec.services):
        owned_by_flag = _owned(spec, name)
        keyed = spec.services[name].flash_attn is not None
        for i, arg in enumerate(spec.services[name].args):
            path = ("services", name, "args", i)
            flag = arg.split("=", 1)[0]
            owned = owned_by_flag.get(flag)
            if keyed and flag in _FA_FLAGS:
                yield Problem(
                    path,
                    f"services.{name}.args[{i}]: {flag} beside 'flash_attn:', which "
                    "renders flash attention in the build's own form; keep one of the two",
                )
            elif owned is not None:
                yield Problem(
                    path, f"services.{name}.args[{i}]: {flag} {owned.reason}; {owned.instead}"
                )
            elif arg in ("", ";"):
                yield Problem(
                    path,
                    f"services.{name}.args[{i}]: an argument {arg!r} cannot be "
                    "rendered: systemd and quadlet end the command line there; "
                    "remove it",
                )
            elif arg.startswith("-") and " " in arg.strip():
                parts = arg.split()
                yield Problem(
                    path,
                    f"services.{name}.args[{i}]: {arg!r} would reach the "
                    "runtime as one argument; write one list item per argument: "
                    + ", ".join(repr(p) for p in parts),
                )


def _ordering(spec: Spec) -> Iterator[Problem]:
    names = sorted(spec.services)
    for name in names:
        svc = spec.services[name]
        for key in ("after", "conflicts"):
            for i, other in enumerate(getattr(svc, key)):
                if other == name:
                    yield Problem(
                        ("services", name, key, i),
                        f"services.{name}.{key}[{i}]: a service cannot name itself",
                    )
                elif other not in spec.services:
                    yield Problem(
                        ("services", name, key, i),
                        f"services.{name}.{key}[{i}]: no service {other!r}{_known(names, other)}",
                    )
    clash = conflicting(spec)
    for name in names:
        for i, other in enumerate(spec.services[name].after):
            if other in clash[name]:
                yield Problem(
                    ("services", name, "after", i),
                    f"services.{name}.after[{i}]: {other!r} conflicts with {name!r}, so "
                    f"{name!r} cannot wait for it to be up; remove it from 'after' or from "
                    "'conflicts'",
                )
    cycle = _cycle(spec)
    if cycle:
        first = cycle[0]
        idx = spec.services[first].after.index(cycle[1])
        yield Problem(
            ("services", first, "after", idx),
            f"services.{first}.after: start order "
            "has a cycle: " + " -> ".join(cycle) + "; remove one of these 'after' "
            "entries",
        )


def conflicting(spec: Spec) -> dict[str, set[str]]:
    """Each service's conflicts, both ways: naming it on either side is enough."""
    out: dict[str, set[str]] = {n: set() for n in spec.services}
    for name, svc in spec.services.items():
        for other in svc.conflicts:
            if other in out and other != name:
                out[name].add(other)
                out[other].add(name)
    return out


def _cycle(spec: Spec) -> list[str] | None:
    """The first cycle in 'after' edges (as name -> ... -> name), in name order."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in spec.services[node].after:
            if nxt not in spec.services or nxt == node:
                continue
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt, [*trail, nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for name in sorted(spec.services):
        if name not in state:
            found = visit(name, [name])
            if found:
                return found
    return None


def _known(names: list[str], word: str) -> str:
    """What the user could have meant: the closest name, else every defined one."""
    if not names:
        return " (none are defined)"
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return " (defined: " + ", ".join(sorted(set(names))) + ")"


def patterns_check(spec: Spec) -> Iterator[Problem]:
    """Every ``tensor_overrides`` pattern of the spec is in the accepted language
    (:mod:`layoutgen.inputs.patterns`)."""
    from layoutgen.inputs.literals import clip

    for name, service in sorted(spec.services.items()):
        for i, rule in enumerate(service.tensor_overrides):
            why = refusal(rule.pattern)
            if why is not None:
                yield Problem(
                    ("services", name, "tensor_overrides", i, "pattern"),
                    f"services.{name}.tensor_overrides[{i}].pattern: {clip(rule.pattern)}: {why}",
                )
