"""The server command line that makes the runtime allocate exactly the plan.

Every decision layoutgen made is pinned in the argv, so the runtime cannot
re-place anything on its own (DESIGN §7): an explicit ``-ngl``, ``-sm layer``
with ``-ts`` set to the shares the plan split layers by, ``-fa``, mainline's
``-fit off`` (recent llama.cpp re-fits placement by default; it also took
``-lm mlock`` for ``--mlock``), and the expert
placement as compact ``-ot`` rules placed *before* ``--cpu-moe`` (mainline
applies overrides in argument order; ik_llama.cpp always puts its CPU-MoE
rules after the user's).  Passthrough ``args`` come last.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from layoutgen.render.mounts import container_path, model_volume
from layoutgen.solve.override import Rule, expert_rules
from layoutgen.solve.placement import HOST
from layoutgen.solve.plan import ServicePlan
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import ExpertsHost, ExpertsNCpuMoe, Rpc, Spec, Speculative

if TYPE_CHECKING:
    from layoutgen.runtimes.base import Runtime

#: where a container finds its LoRA adapters (each mounted read-only by name), and the
#: directories a daily update picks the newest adapter from
ADAPTERS_DIR = PurePosixPath("/adapters")
UPDATES_DIR = PurePosixPath("/adapter-updates")
#: where a container finds its API key file (podman secret or mounted host file)
API_KEY_PATH = "/run/secrets/api-key"


def flash_attn_arg(rs: ResolvedService, rt: Runtime | None = None) -> str | None:
    """The value of the last ``-fa``/``--flash-attn`` in passthrough args, if any, as
    RT's build reads it: where -fa takes no value (ik before 3928) the flag alone is
    "on"."""
    value = None
    args = rs.service.args
    if rt is not None and any(a in ("-fa", "--flash-attn") for a in args) and rt.fa_bare():
        return "on"
    for i, arg in enumerate(args):
        if arg in ("-fa", "--flash-attn") and i + 1 < len(args):
            value = args[i + 1]
    return value


def flash_attn(rs: ResolvedService, rt: Runtime | None = None) -> bool:
    """Whether the server runs with flash attention: the one answer argv and sizing share.

    The service's ``flash_attn:`` decides, else the user's ``-fa`` (``auto`` counts as
    on: both runtimes enable
    it where the backend supports it, and llama.cpp does for a quantized V
    cache); otherwise layoutgen renders ``-fa on`` with GPUs and ``-fa off``
    on the CPU alone.
    """
    if rs.service.flash_attn is not None:
        return rs.service.flash_attn
    value = flash_attn_arg(rs, rt)
    if value is None:
        return bool(rs.gpus)
    return value not in ("off", "0", "false")


def model_path(spec: Spec, rs: ResolvedService) -> str:
    """Where the server finds the model: in a container, under /models/<id>/ or in its
    Hugging Face cache repository (render/mounts.py); else on the host."""
    runtime = spec.runtimes[rs.service.runtime]
    path = spec.models[rs.service.model].path
    if runtime.image is None:
        return path
    return container_path(path, rs.service.model)


def server_argv(
    spec: Spec, rs: ResolvedService, plan: ServicePlan, shares: tuple[float, ...]
) -> tuple[str, ...]:
    svc = rs.service
    rt = spec.runtimes[svc.runtime].rules()
    argv = ["llama-server", "-m", model_path(spec, rs)]
    argv += ["-c", str(svc.ctx), "-np", str(rs.parallel)]
    argv += ["-ctk", rs.cache_type_k, "-ctv", rs.cache_type_v]
    argv += ["-b", str(rs.batch), "-ub", str(rs.ubatch)]
    if rs.threads is not None:
        argv += ["-t", str(rs.threads)]
    if rs.threads_batch is not None:
        argv += ["-tb", str(rs.threads_batch)]
    endpoints = [rpc.endpoint for rpc in rpc_devices(spec, rs)]
    if endpoints:
        # before -ot: llama.cpp resolves -ot buffer names as it parses arguments
        argv += ["--rpc", ",".join(endpoints)]
    layers = rs.service.gpu_layers
    argv += ["-ngl", ("999" if layers is None else str(layers)) if rs.gpus else "0"]
    if len(rs.gpus) > 1:
        argv += ["-sm", rs.service.split_mode, "-ts", ",".join(map(_share, shares))]
    argv += rt.fit_off()
    if flash_attn_arg(rs, rt) is None:
        argv += rt.flash_attn_flags(flash_attn(rs, rt))
    argv += _overrides(plan)
    argv += _experts(rs, plan)
    if rs.mlock:
        argv += rt.mlock()
    if rs.reasoning is False:
        argv += rt.reasoning_off()
    argv += _llama_lora(spec, rs)
    argv += _draft(spec, rs, plan)
    argv += ["--host", _bind(spec, rs), "--port", str(svc.port)]
    key = svc.api_key
    if key is not None and (key.secret is not None or key.file is not None):
        inside = spec.runtimes[svc.runtime].image is not None
        argv += ["--api-key-file", API_KEY_PATH if inside else str(key.file)]
    argv += list(svc.args)
    return tuple(argv)


def _draft(spec: Spec, rs: ResolvedService, plan: ServicePlan) -> list[str]:
    """A draft model pinned as the plan places it, with llama.cpp 11434's flags
    (common/arg.cpp): ``-md`` (``--spec-draft-model``, 4265-4272), every layer on
    GPUs: ``-ngld 999`` (``--spec-draft-ngl``, 4246-4264; as the target's ``-ngl
    999``), the draft's GPUs by device name: ``-devd CUDA0,...``
    (``--spec-draft-device``, 4237-4244, parse_device_list as ``-dev``),
    ``-ctkd``/``-ctvd`` (``--spec-draft-type-k``/``-v``, 4099-4124; default f16,
    common.h:346-347) when not f16, ``--spec-draft-n-max N`` (4149-4158) when given."""
    draft = rs.service.draft
    if draft is None:
        return []
    path = spec.models[draft.model].path
    inside = spec.runtimes[rs.service.runtime].image is not None
    out = ["-md", container_path(path, draft.model) if inside else path]
    wanted = set(draft.gpus if draft.gpus is not None else rs.gpus)
    # in device order: the buffer names (CUDA0, CUDA1, ...) are the device names
    names = sorted(
        (b for b, g in plan.device_of.items() if g in wanted and b.startswith("CUDA")),
        key=lambda b: (len(b), b),
    )
    out += ["-ngld", "999", "-devd", ",".join(names)]
    if draft.cache_type_k not in (None, "f16"):
        out += ["-ctkd", draft.cache_type_k]
    if draft.cache_type_v not in (None, "f16"):
        out += ["-ctvd", draft.cache_type_v]
    if draft.max_tokens is not None:
        out += ["--spec-draft-n-max", str(draft.max_tokens)]
    return out


def draft_mounts(spec: Spec, rs: ResolvedService) -> list[str]:
    """podman volume (read-only) for the draft model's directory, as the model's."""
    draft = rs.service.draft
    if draft is None or spec.runtimes[rs.service.runtime].image is None:
        return []
    return [model_volume(spec.models[draft.model].path, draft.model)[0]]


def adapter_path(spec: Spec, rs: ResolvedService, name: str, host_path: str) -> str:
    """An adapter as the server sees it: its host path for a native server; in a
    container, vLLM's directory at /adapters/NAME, llama.cpp's file inside it."""
    if spec.runtimes[rs.service.runtime].image is None:
        return host_path
    if spec.runtimes[rs.service.runtime].rules().MEMORY == "budget":
        return str(ADAPTERS_DIR / name)
    return str(ADAPTERS_DIR / name / PurePosixPath(host_path).name)


def adapter_mounts(spec: Spec, rs: ResolvedService) -> list[str]:
    """podman volumes (read-only) for the adapters, and for the update directories."""
    lora = rs.service.lora
    if lora is None or spec.runtimes[rs.service.runtime].image is None:
        return []
    budgeted = spec.runtimes[rs.service.runtime].rules().MEMORY == "budget"
    out = []
    for a in lora.adapters:
        host = PurePosixPath(a.path) if budgeted else PurePosixPath(a.path).parent
        out.append(f"{host}:{ADAPTERS_DIR / a.name}:ro,z")
        if a.update is not None and a.update.apply == "load":
            out.append(f"{a.update.dir}:{UPDATES_DIR / a.name}:ro,z")
    return out


def _llama_lora(spec: Spec, rs: ResolvedService) -> list[str]:
    """``--lora FILE`` (``--lora-scaled FILE SCALE``): llama.cpp applies every one."""
    lora = rs.service.lora
    out: list[str] = []
    for a in () if lora is None else lora.adapters:
        path = adapter_path(spec, rs, a.name, a.path)
        out += ["--lora", path] if a.scale is None else ["--lora-scaled", path, _share(a.scale)]
    return out


def _share(value: float) -> str:
    """A -ts share as written: 97247, 12.5 (never an exponent, never a trailing .0)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def rpc_devices(spec: Spec, rs: ResolvedService) -> list[Rpc]:
    """The service's rpc devices in ``--rpc`` order (spec order; see footprint.device_order)."""
    return [g.rpc for g in spec.host.gpus if g.rpc is not None and g.id in rs.gpus]


def _bind(spec: Spec, rs: ResolvedService) -> str:
    """The address the server listens on.

    A native server binds 127.0.0.1 (0.0.0.0 only with ``expose``).  In a
    container it must listen on the container's own interfaces, or podman's
    port forwarding cannot reach it; who may connect is decided by the
    publish address on the host (``127.0.0.1:PORT:PORT`` unless ``expose``).
    """
    if spec.runtimes[rs.service.runtime].image is not None:
        return "0.0.0.0"
    return "0.0.0.0" if rs.service.expose else "127.0.0.1"


def _overrides(plan: ServicePlan) -> list[str]:
    """The spec's tensor_overrides, first on the line: the runtime takes the first
    rule that matches, so they win over layoutgen's own."""
    out: list[str] = []
    for pattern, target in plan.tensor_overrides:
        out += ["-ot", Rule(pattern, "CPU" if target == HOST else target).arg()]
    return out


def _experts(rs: ResolvedService, plan: ServicePlan) -> list[str]:
    mode = rs.experts
    if not rs.gpus:
        return []
    if isinstance(mode, ExpertsHost):
        return ["--cpu-moe"]
    if isinstance(mode, ExpertsNCpuMoe):
        return ["--n-cpu-moe", str(mode.n)]
    host_layers = plan.expert_layers.get("host", ())
    buffer_of = {dev: buf for buf, dev in plan.device_of.items() if dev != "host"}
    singles = {buffer_of[dev]: names for dev, names in plan.expert_tensors.items()}
    moved: dict[str, list[int]] = {}
    for dev, layers in plan.expert_layers.items():
        if dev == "host":
            continue
        buf = buffer_of[dev]
        # With --cpu-moe every GPU expert layer needs its rule; without it, only
        # layers whose experts sit on another GPU than their attention.
        keep = [n for n in layers if host_layers or plan.layer_buffer.get(n) != buf]
        if keep:
            moved[buf] = keep
    out: list[str] = []
    for rule in expert_rules(moved, singles):
        out += ["-ot", rule.arg()]
    return [*out, "--cpu-moe"] if host_layers else out


def vllm_argv(spec: Spec, rs: ResolvedService, plan: ServicePlan) -> tuple[str, ...]:
    """``vllm serve`` pinned to the plan: the model directory, the request shape
    (``--max-model-len``, ``--max-num-seqs``, ``--max-num-batched-tokens``), the
    tensor-parallel size, the budget (``--gpu-memory-utilization``, and
    ``--kv-cache-memory-bytes`` where the release has it), the KV cache dtype;
    then the passthrough ``args``.  The model goes as ``--model``: both entrypoints
    of the official image take it (``vllm serve``, and the older
    ``python3 -m vllm.entrypoints.openai.api_server``).  The API key reaches the
    server as ``VLLM_API_KEY`` from a podman secret, never as an argument."""
    svc = rs.service
    b = plan.budget
    assert b is not None
    argv = ["vllm", "serve", "--model", model_path(spec, rs)]
    argv += ["--host", _bind(spec, rs), "--port", str(svc.port)]
    argv += ["--max-model-len", str(b.max_model_len), "--max-num-seqs", str(b.max_num_seqs)]
    argv += ["--max-num-batched-tokens", str(rs.batch)]
    argv += ["--tensor-parallel-size", str(b.tensor_parallel_size)]
    argv += ["--gpu-memory-utilization", b.utilization]
    if b.kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(b.kv_cache_memory_bytes)]
    argv += ["--kv-cache-dtype", svc.kv_cache_dtype or "auto"]
    if svc.enforce_eager:
        argv.append("--enforce-eager")
    if svc.served_model_name is not None:
        argv += ["--served-model-name", svc.served_model_name]
    lora = svc.lora
    if lora is not None:
        n = lora.max_loras or 1
        argv += ["--enable-lora", "--max-loras", str(n)]
        argv += ["--max-lora-rank", str(lora.max_lora_rank or 16)]
        argv += ["--max-cpu-loras", str(lora.max_cpu_loras or n)]
        argv.append("--lora-modules")
        argv += [f"{a.name}={adapter_path(spec, rs, a.name, a.path)}" for a in lora.adapters]
    if svc.speculative is not None:
        argv += ["--speculative-config", speculative_config(svc.speculative)]
    argv += list(svc.args)
    return tuple(argv)


def speculative_config(sp: Speculative) -> str:
    """``--speculative-config`` JSON: ``SpeculativeConfig`` fields of vLLM 0.11.0
    (``vllm/config/speculative.py:47-53``: ``method``, ``num_speculative_tokens``,
    ``model``); compact and key-sorted, so the argv is stable."""
    doc: dict[str, object] = {"method": sp.method, "num_speculative_tokens": sp.num_tokens}
    if sp.model is not None:
        doc["model"] = sp.model
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
