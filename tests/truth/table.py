"""The truth table: every public start-up log in tests/truth/records, planned and compared.

For each record: the model's profile from what its log prints
(:mod:`tests.truth.synth`), a spec written from its settings (context,
slots, batch sizes, KV types, devices and their split, where its ``-ot``
rules put the experts, flash attention, ik's ``-mla``/``-amb``, the
runtime's build as ``version:``), the real validator and solver, and every
logged buffer beside the planned one.  What a spec cannot say (``-sm row``,
a BLAS build, unknown GPU shares, a device that is not CUDA) keeps the record
out of the figures, with the reason.

Weights are compared only as a check of the synthesized inventory (the log
does not say each tensor's type); KV and compute are what the table
measures, and per-device totals are taken with the logged weights (the
plan's weights are exact when the profile comes from the GGUF, as the
oracle suites show).

``python -m tests.truth.table`` prints the table; ``--docs`` (or its old name
``--readme``) rewrites its section in docs/explanation/accuracy.md (``make truth-table``).
"""

from __future__ import annotations

import datetime
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from layoutgen.calibrate.startlog import read_log
from layoutgen.core.override import Rule, apply
from layoutgen.core.placement import expert_layer
from layoutgen.errors import InvalidInput
from layoutgen.inputs import source
from layoutgen.models.profile import dump_profile
from layoutgen.render.validate import validate_document
from layoutgen.spec import flags as flag_table
from tests.truth import synth

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "tests" / "truth" / "records"
MiB = 2**20
#: every GPU's capacity floor: large enough that no record is refused for room
ROOMY_MIB = 1 << 22  # 4 TiB
_GPU = re.compile(r"^(?:CUDA|ROCm|Vulkan|SYCL|Metal|AMD)(?P<n>[0-9]*)$")
_BUILD = re.compile(r"^b?(?P<n>[0-9]{1,6})\b")


@dataclass(frozen=True)
class Row:
    buffer: str
    field: str  # weights | kv | compute | total
    logged: int
    planned: int | None  # None: the plan has no such buffer

    @property
    def error(self) -> float | None:
        """(planned - logged) / logged; None when either is missing or logged is 0."""
        if self.planned is None or not self.logged:
            return None
        return (self.planned - self.logged) / self.logged


@dataclass(frozen=True)
class Outcome:
    id: str
    runtime: str
    build: str | None
    arch: str
    gpus: int
    reason: str | None  # None: expressible
    rows: tuple[Row, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: host memory that is allocated (every buffer off the GPUs but a mapped file's
    #: span) by part, logged and planned, whatever each build names its buffers
    host: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def load(path: Path) -> dict[str, Any]:
    return YAML(typ="safe").load(path.read_text())


def records(folder: Path = RECORDS) -> list[Path]:
    """The record files of FOLDER (the held-out logs: tests/truth/holdout)."""
    return sorted(folder.glob("*.yaml"))


def _bytes(text: str) -> int:
    return int(Decimal(text.removesuffix("MiB").replace(",", ".")) * MiB)


def logged_buffers(record: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Buffer -> field -> bytes, as layoutgen's own log reader reads them."""
    text = (record.get("logged") or "").replace(",", ".")  # decimal commas (some locales)
    entries = read_log(text, record["id"])
    return {buf: {f: _bytes(v) for f, v in fields.items()} for buf, fields in entries.items()}


def version(record: Mapping[str, Any]) -> str | None:
    """The build as ``version:``: the record's own ``version`` (a pull request's branch,
    whose commit count no release shares), else its build number, else the post's
    date, else none (newest)."""
    if record.get("version"):
        return str(record["version"])
    build = str(record.get("build") or "")
    m = _BUILD.match(build)
    if m and int(m["n"]) > 0:
        return m["n"]
    posted = record.get("posted")
    return str(posted) if posted else None


def ik_build(record: Mapping[str, Any]) -> int | None:
    """RECORD's ik_llama.cpp build as a number: its own, else the newest of the day it
    was posted (flags.build_of_day); None: not known (the newest forms)."""
    v = version(record)
    if v is None:
        return None
    if v.isdigit():
        return int(v)
    try:
        return flag_table.build_of_day(datetime.date.fromisoformat(v))
    except ValueError:
        return None


def _reads(build: int | None, flag: str, arity: int) -> bool:
    """Whether ik_llama.cpp BUILD (None: the newest) has FLAG, reading ARITY values."""
    tab = flag_table.table("ik_llama.cpp")
    spans = tab.rows[flag][1]
    if build is None:
        return spans[-1].until is None and spans[-1].arity == arity
    found = flag_table.at(tab, spans, build).span
    return found is not None and found.arity == arity


def _flag(settings: Mapping[str, Any], key: str) -> Any:
    return settings.get(key)


def _fa(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "on", "enabled", "auto", "-1")


def _shares(record: Mapping[str, Any], n_gpus: int) -> list[float]:
    """The tensor split as shares per GPU; equal GPUs without -ts split equally."""
    ts = (record.get("settings") or {}).get("tensor_split")
    if ts:
        shares = [float(x) for x in re.split(r"[,/ ]+", str(ts).strip()) if x]
        if len(shares) < n_gpus:
            shares += [0.0] * (n_gpus - len(shares))
        return shares[:n_gpus]
    names = [re.sub(r",? *VMM.*$", "", str(g)) for g in record.get("gpus") or []]
    if n_gpus > 1 and len(set(names[:n_gpus])) > 1:
        raise synth.NotExpressible(
            "GPUs differ and no -ts: llama.cpp splits by each GPU's free memory at start, "
            "which the log does not print"
        )
    return [1.0] * n_gpus


def _counted_shares(
    record: Mapping[str, Any],
    logged: Mapping[str, Mapping[str, int]],
    plan: Any,
    gpu_buffers: list[str],
) -> list[float] | None:
    """Shares that reproduce the layer counts the log's KV buffers show, for equal GPUs
    without -ts that split by count unequally; None when equal shares already do.

    Such a run split by each GPU's free memory at start (``llama_get_device_memory``,
    src/llama.cpp of 2025), which the log does not print; where every layer's KV is
    the same size, each GPU's KV buffer counts its layers, and ``-ts`` set to those
    counts (the output layer as one more on the last GPU) gives the same split.  The
    KV comparison of such a record checks only the per-layer size, not the split."""
    if len(gpu_buffers) < 2 or (record.get("settings") or {}).get("tensor_split"):
        return None
    layers = [sum(1 for b in plan.layer_buffer.values() if b == g) for g in gpu_buffers]
    kv = [plan.buffers[g].kv if g in plan.buffers else 0 for g in gpu_buffers]
    if not all(layers) or any("kv" not in logged.get(g, {}) for g in gpu_buffers):
        return None
    per_layer = {round(k / n) for k, n in zip(kv, layers, strict=True)}
    if len(per_layer) != 1 or not (size := per_layer.pop()):
        return None  # layers of different KV sizes: the log's buffers do not count them
    counts = [logged[g]["kv"] / size for g in gpu_buffers]
    if any(abs(c - round(c)) > 0.01 for c in counts) or round(sum(counts)) != sum(layers):
        return None
    if [round(c) for c in counts] == layers:
        return None
    shares = [float(round(c)) for c in counts]
    shares[-1] += 1  # the output layer
    return shares


def offloaded_layers(record: Mapping[str, Any]) -> int | None:
    """-ngl as the command set it, else as the log's "offloaded K/N layers" line
    shows it ran (the default changed over the years: 0 in 2025 builds)."""
    ngl = (record.get("settings") or {}).get("ngl")
    if ngl is not None:
        return int(ngl)
    m = re.search(r"offloaded (\d+)/\d+ layers to GPU", str(record.get("logged") or ""))
    return int(m[1]) if m else None


def split_rows(record: Mapping[str, Any]) -> bool:
    """Whether the run split matrices by rows (-sm row)."""
    s = record.get("settings") or {}
    text = str(record.get("command") or "") + " " + " ".join(map(str, s.get("other_flags") or []))
    return bool(re.search(r"(?:^|\s)(?:-sm|--split-mode)\s+row\b", text))


def _why_not(record: Mapping[str, Any], n_layer: int) -> str | None:
    s = record.get("settings") or {}
    flags = " ".join(str(f) for f in s.get("other_flags") or [])
    command = str(record.get("command") or "")
    if re.search(r"(?:^|\s)-sm\s+(?:graph|attn)|--split-mode\s+(?:graph|attn)", command + flags):
        return "-sm graph/attn: ik_llama.cpp's tensor parallelism (not planned yet)"
    if re.search(r"(?:^|\s)(?:-nkvo|--no-kv-offload)\b", command + " " + flags):
        return "-nkvo (KV cache in host memory)"
    if re.search(r"(?:^|\s)(?:-ser|--smart-expert-reduction)\b", command + " " + flags):
        return "-ser (ik smart expert reduction)"
    return None


def _device(target: str, n_gpus: int) -> str:
    """An -ot target as a spec device: CPU (and CPU_* buffers) -> host, CUDAn -> gpu{n}."""
    if target.upper() == "CPU" or target.startswith("CPU"):
        return "host"
    m = _GPU.match(target)
    if m and int(m["n"] or 0) < n_gpus:
        return f"gpu{m['n'] or 0}"
    raise synth.NotExpressible(f"-ot target {target} is not a device layoutgen plans")


def _rules(record: Mapping[str, Any]) -> list[Rule]:
    """The record's -ot rules in command-line order (one -ot may hold several, by
    commas), then --cpu-moe's."""
    s = record.get("settings") or {}
    rules = []
    for text in s.get("overrides") or []:
        for part in str(text).split(","):
            pattern, _, target = part.strip().strip("\"'").rpartition("=")
            rules.append(Rule(pattern, target.strip()))
    if s.get("cpu_moe"):
        rules.append(Rule(r"\.ffn_(up|down|gate)_exps", "CPU"))
    return rules


def placement(
    record: Mapping[str, Any], names: list[str], layer_gpu: Mapping[int, str], n_gpus: int
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The spec's ``experts:`` and ``tensor_overrides:`` for the record's -ot /
    --cpu-moe / --n-cpu-moe.  Rules that move only routed experts become an expert
    placement; rules that move other tensors too (norms, routers, shared experts)
    are the spec's ``tensor_overrides`` verbatim, CPU as host and CUDAn as that
    GPU, the experts no rule takes staying with their layers, as the runtime does."""
    s = record.get("settings") or {}
    rules = _rules(record)
    n_cpu = s.get("n_cpu_moe")
    if n_cpu and rules:
        raise synth.NotExpressible("--n-cpu-moe beside -ot rules")
    if n_cpu:
        return {"mode": "n-cpu-moe", "n": int(n_cpu)}, []
    got = apply(rules, names)
    if any(t and expert_layer(n) is None for n, t in got.items()):
        overrides = [{"pattern": r.pattern, "device": _device(r.target, n_gpus)} for r in rules]
        return {"mode": "gpu"}, overrides
    return _experts(got, layer_gpu, n_gpus), []


def _experts(
    got: Mapping[str, str | None], layer_gpu: Mapping[int, str], n_gpus: int
) -> dict[str, Any]:
    """The spec's ``experts:`` for rules that move routed experts only."""
    per_layer: dict[int, set[str]] = {}
    for name, target in got.items():
        layer = expert_layer(name)
        if layer is None:
            continue
        where = layer_gpu.get(layer, "host") if target is None else _device(target, n_gpus)
        per_layer.setdefault(layer, set()).add(where)
    split = sorted(layer for layer, where in per_layer.items() if len(where) > 1)
    if split:
        raise synth.NotExpressible(f"-ot splits the experts of blk.{split[0]} (issue 14)")
    placed = {layer: where.pop() for layer, where in per_layer.items()}
    if all(w == "host" for w in placed.values()):
        return {"mode": "host"}
    # experts where their layers are (a layer -ngl leaves on the CPU: host)
    if all(w == layer_gpu.get(layer, "host") for layer, w in placed.items()):
        return {"mode": "gpu"}
    by_gpu: dict[str, list[int]] = {}
    for layer, w in sorted(placed.items()):
        if w != "host":
            by_gpu.setdefault(w, []).append(layer)
    return {"mode": "explicit", "layers": by_gpu}


def host_isa(record: Mapping[str, Any]) -> str | None:
    """host.cpu.isa as the log shows it, None where it cannot say (the spec's default).

    A log with an AMX buffer ran on a host with AMX (Xeon Sapphire Rapids and
    later); else the CPU features ``system_info`` prints as ``NAME = 1``, when the
    line is whole (it ends with ``|``): AMX_INT8, AVX512, AVX2, or NEON with or
    without the dot product (DOTPROD, or MATMUL_INT8 which implies it; llama.cpp
    prints DOTPROD from b4358, #10890: before, NEON alone cannot say)."""
    if "AMX" in logged_buffers(record):
        return "x86-64-v4-amx"
    line = next((x for x in (record.get("logged") or "").splitlines() if "system_info:" in x), None)
    if line is None or not line.rstrip().endswith("|"):
        return None
    on = set(re.findall(r"([A-Z0-9_]+) = 1\b", line))
    if "NEON" in on:
        build = version(record)
        says = record.get("runtime") == "llama.cpp" and build is not None and build.isdigit()
        if on & {"DOTPROD", "MATMUL_INT8"} or not (says and int(str(build)) >= 4358):
            return "aarch64"
        return "aarch64-v8.0"
    for flag, isa in (
        ("AMX_INT8", "x86-64-v4-amx"),
        ("AVX512", "x86-64-v4"),
        ("AVX2", "x86-64-v3"),
    ):
        if flag in on:
            return isa
    return "x86-64"


def spec_for(
    record: Mapping[str, Any],
    profile_path: Path,
    experts: Mapping[str, Any],
    shares: list[float],
    overrides: list[dict[str, str]] | None = None,
    *,
    versions: bool = True,
) -> dict[str, Any]:
    """The spec of RECORD's run; VERSIONS=False: without its build, as a user who
    does not know it writes it (planned for every build)."""
    s = record.get("settings") or {}
    n_gpus = len(shares)
    low = min((x for x in shares if x > 0), default=1.0)
    gpus = [
        {
            "id": f"gpu{i}",
            "index": i,
            "vram": f"{max(1, round(x / low * ROOMY_MIB))}MiB",
            "reserve": "0",
        }
        for i, x in enumerate(shares)
    ]
    # flash attention as the record's build spells it: a bare -fa (on; off by default)
    # on ik before 3928, -fa on|off since (the command the run had, build or none)
    args: list[str] = ["-fa", "on" if _fa(s.get("flash_attn")) else "off"]
    fa_key: dict[str, bool] = {}
    on, n = _fa(s.get("flash_attn")), ik_build(record)
    if record.get("runtime") == "ik_llama.cpp" and n is not None:
        written = flag_table.flash_attn_args("ik_llama.cpp", n, on)
        if written is None or (not on and shares):
            # off where no flag of the build says off (before 3928 none is given;
            # 3928-3984 -no-fa): layoutgen would render -fa on with GPUs, so the spec
            # says 'flash_attn: false' and layoutgen writes the build's form
            args, fa_key = [], {"flash_attn": False}
        else:
            args = written
    if record.get("runtime") == "ik_llama.cpp":
        # each flag in the form the record's build reads (the command it ran): -mla a
        # switch before 3575, -amb from 3576, -fmoe before 3928 and -no-fmoe since
        n = ik_build(record)
        if s.get("mla") is not None:
            mla = int(s["mla"])
            if _reads(n, "-mla", 1):
                args += ["-mla", str(mla)]
            elif _reads(n, "-mla", 0) and mla:
                args.append("-mla")
        if _reads(n, "-amb", 1):
            args += ["-amb", str(s.get("attn_max_b") or 0)]  # 0 when the log says so
        fmoe = s.get("fused_moe")
        if fmoe is not None and _fa(fmoe) and _reads(n, "-fmoe", 0):
            args.append("-fmoe")
        elif fmoe is not None and not _fa(fmoe) and _reads(n, "-no-fmoe", 0):
            args.append("-no-fmoe")
    flags = [str(f) for f in s.get("other_flags") or []]
    if "--no-mmap" in flags:
        args.append("--no-mmap")
    if "-rtr" in flags and record.get("runtime") == "ik_llama.cpp":
        args.append("-rtr")  # run-time repacking, which turns mmap off
    runtime: dict[str, Any] = {"kind": record["runtime"], "binary": "/opt/runtime/llama-server"}
    if record.get("blas"):
        runtime["blas"] = True
    if versions and (v := version(record)) is not None:
        runtime["version"] = v
    logged = record.get("logged") or ""
    if m := re.search(r"n_copies\s*=\s*([0-9]+)", logged):
        runtime["sched_copies"] = int(m[1])  # the build's GGML_SCHED_MAX_COPIES
    elif re.search(r"(?:llama_new_context_with_model|llama_context): n_ubatch", logged):
        # both runtimes print "pipeline parallelism enabled (n_copies=N)" in the
        # context block whenever it is on: a context block without it ran without
        runtime["sched_copies"] = 1
    batch = int(s.get("n_batch") or 2048)
    service: dict[str, Any] = {
        **({"split_mode": "row"} if split_rows(record) else {}),
        "model": "m",
        "runtime": "r",
        "role": "worker",
        "gpus": [g["id"] for g in gpus],
        "port": 8000,
        "ctx": int(s["n_ctx"]),
        "parallel": int(s.get("n_seq_max") or 1),
        "batch": max(batch, int(s.get("n_ubatch") or 512)),
        "ubatch": int(s.get("n_ubatch") or 512),
        "cache_type_k": str(s.get("type_k") or "f16").lower(),
        "cache_type_v": str(s.get("type_v") or s.get("type_k") or "f16").lower(),
        "experts": dict(experts) if n_gpus else {"mode": "host"},
        "mlock": "--mlock" in flags,
        **fa_key,
        "args": args,
    }
    if overrides:
        service["tensor_overrides"] = overrides
    ngl = offloaded_layers(record)
    if n_gpus and ngl is not None:
        service["gpu_layers"] = int(ngl)
    cpu: dict[str, Any] = {"cores": 256, "threads": 512}
    if (isa := host_isa(record)) is not None:
        cpu["isa"] = isa
    return {
        "host": {
            "name": "truth",
            "cpu": cpu,
            "ram": "64TiB",
            "ram_reserve": "0",
            "gpu_overhead": "0",
            "gpus": gpus,
        },
        "models": {"m": {"path": "/models/m.gguf", "profile": str(profile_path)}},
        "runtimes": {"r": runtime},
        "services": {"s": service},
    }


def _solve(spec: dict[str, Any], tmp: Path, name: str) -> Any:
    from ruamel.yaml import YAML as W

    path = tmp / f"{name}.yaml"
    with path.open("w") as f:
        W(typ="safe", pure=True).dump(spec, f)
    # memory, not flags: a record whose build is unknown is planned for every build
    # even where builds would take different flags (layoutgen.solve.builds)
    return validate_document(source.load(path, str(path)), one_argv=False)


def evaluate(path: Path, tmp: Path, *, versions: bool = True) -> Outcome:
    record = load(path)
    model = record.get("model") or {}
    head = {
        "id": record["id"],
        "runtime": record.get("runtime", "?"),
        "build": version(record),
        "arch": str(model.get("arch")),
    }
    logged = logged_buffers(record)
    gpu_buffers = sorted(
        (b for b in logged if _GPU.match(b)), key=lambda b: int(_GPU.match(b)["n"] or 0)
    )
    if split_rows(record):
        # -sm row: the other GPUs hold their rows in the one CUDA_Split buffer
        gpu_buffers = [f"CUDA{i}" for i in range(len(record.get("gpus") or []))]
    head["gpus"] = len(gpu_buffers)
    try:
        if any(not b.startswith("CUDA") for b in gpu_buffers):
            raise synth.NotExpressible(f"{gpu_buffers[0]} is not a CUDA device")
        if gpu_buffers and [int(_GPU.match(b)["n"] or -1) for b in gpu_buffers] != list(
            range(len(gpu_buffers))
        ):
            raise synth.NotExpressible("the log's GPUs are not CUDA0..N (some hold nothing)")
        both = "compute" in logged.get("CPU", {}) and "compute" in logged.get("CUDA_Host", {})
        if both and not record.get("blas"):
            # the CPU backend's compute buffer is CUDA_Host beside a GPU: a second one
            # named CPU belongs to another host backend (BLAS), which the record must
            # show the build had (its "blas: true", from the thread)
            raise synth.NotExpressible(
                "a CPU compute buffer beside CUDA_Host's, and no word of the build's BLAS"
            )
        kv_on_host = [b for b, f in logged.items() if "kv" in f and not _GPU.match(b)]
        ngl = offloaded_layers(record)
        done = re.search(r"offloaded (\d+)/(\d+) layers to GPU", str(record.get("logged") or ""))
        if done and ngl and int(done[1]) == 0:
            # no spec describes a loader that ignores its flag (GLM-4-0414 loaded as
            # chatglm in ik PR #333's work in progress: -ngl 99, 0 of 62 offloaded)
            raise synth.NotExpressible(
                f"the log offloaded 0 of {done[2]} layers where -ngl {ngl} asks for "
                "them: a build whose loader did not follow -ngl"
            )
        if gpu_buffers and kv_on_host and ngl is None:
            raise synth.NotExpressible(
                f"KV cache in {kv_on_host[0]} beside GPUs, and neither the command nor "
                "the log says how many layers were offloaded"
            )
        profile = synth.profile(record)
        if why := _why_not(record, profile.hparams.n_layer):
            raise synth.NotExpressible(why)
        profile_path = tmp / f"{record['id']}.profile.yaml"
        profile_path.write_text(dump_profile(profile))
        shares = _shares(record, len(gpu_buffers))
        names = [t.name for t in profile.tensors()]
        # the first pass turns the record's literal command (its -ot rules, its GPUs'
        # shares) into a spec under the build it ran; only the plan of that spec is
        # then made without the build (VERSIONS=False): the spec is the same either way
        first = spec_for(record, profile_path, {"mode": "gpu"}, shares)
        layer_gpu: dict[int, str] = {}
        if gpu_buffers:
            plan = _solve(first, tmp, record["id"] + ".pass1").plan.services[0]
            if counted := _counted_shares(record, logged, plan, gpu_buffers):
                again = spec_for(record, profile_path, {"mode": "gpu"}, counted)
                redo = _solve(again, tmp, record["id"] + ".pass1").plan.services[0]
                # the same to the log's 0.01 MiB
                kv_off = [abs(redo.buffers[g].kv - logged[g]["kv"]) for g in gpu_buffers]
                if max(kv_off) <= MiB // 100:
                    shares, plan = counted, redo
            gpu_of = {buf: dev for buf, dev in plan.device_of.items()}
            layer_gpu = {n: gpu_of[b] for n, b in plan.layer_buffer.items()}
        experts, overrides = placement(record, names, layer_gpu, len(gpu_buffers))
        spec = spec_for(record, profile_path, experts, shares, overrides, versions=versions)
        result = _solve(spec, tmp, record["id"])
    except synth.NotExpressible as exc:
        return Outcome(**head, reason=str(exc))
    except InvalidInput as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else "invalid"
        said = first_line.split(" error: ", 1)[-1]  # without the temporary spec's path
        return Outcome(**head, reason=f"refused by layoutgen: {said[:240]}")
    sp = result.plan.services[0]
    rows: list[Row] = []
    # a record whose pinned KV allocation fell back to a plain CPU buffer (ggml-cuda
    # does when cudaMallocHost fails or GGML_CUDA_NO_PINNED is set): the plan's
    # CUDA_Host KV is that buffer, under the other name
    fallback = record.get("kv_pinned_fallback") and "CUDA_Host" in sp.buffers
    for buf, fields in sorted(logged.items()):
        part = sp.buffers.get(buf)
        for f in ("weights", "kv", "compute"):
            if f in fields:
                planned = None if part is None else getattr(part, f)
                if buf == "CUDA_Split" and f == "weights":
                    # the log's one split buffer is the plan's parts on every GPU
                    parts = [p for b, p in sp.buffers.items() if b.startswith("CUDA_Split[")]
                    planned = sum(p.weights for p in parts) if parts else None
                if f == "kv" and buf == "CPU" and fallback:
                    planned = sp.buffers["CUDA_Host"].kv
                rows.append(Row(buf, f, fields[f], planned))
        if part is not None and buf in gpu_buffers and "compute" in fields:
            # a device total needs all three: a run that failed to allocate its
            # compute buffer (an OOM record) logged only weights and KV
            logged_total = sum(fields.values())
            planned_total = fields.get("weights", 0) + part.kv + part.compute
            rows.append(Row(buf, "total", logged_total, planned_total))
    extra = sorted(b for b, p in sp.buffers.items() if b not in logged and p.kv + p.compute)
    notes = tuple(f"planned {b} is not in the log" for b in extra)
    host = {
        f: (
            sum(
                fields.get(f, 0)
                for buf, fields in logged.items()
                if not _GPU.match(buf) and not buf.startswith("CUDA_Split") and "Mapped" not in buf
            ),
            sum(
                getattr(part, f)
                for buf, part in sp.buffers.items()
                if sp.device_of[buf] == "host" and "Mapped" not in buf
            ),
        )
        for f in ("weights", "kv", "compute")
    }
    return Outcome(**head, reason=None, rows=tuple(rows), notes=notes, host=host)


def evaluate_all(*, versions: bool = True, folder: Path = RECORDS) -> list[Outcome]:
    """Every record of FOLDER planned; VERSIONS=False: each with its build removed."""
    with tempfile.TemporaryDirectory() as tmp:
        return [evaluate(p, Path(tmp), versions=versions) for p in records(folder)]


# ---- summary ---------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    records: int
    expressible: int
    kv: tuple[int, int]  # within ±1 %, of
    compute: tuple[int, int, int]  # within ±15 %, below -15 %, of
    totals: tuple[int, int]  # within ±3 %, of
    worst_compute: float | None
    weights: tuple[int, int] = (0, 0)  # within ±0.5 %, of


def summarize(outcomes: list[Outcome]) -> Summary:
    ok = [o for o in outcomes if o.reason is None]

    def errors(kind: str) -> list[float]:
        return [
            r.error if r.error is not None else -1.0
            for o in ok
            for r in o.rows
            if r.field == kind and r.logged
        ]

    kv, cp, tot, wt = errors("kv"), errors("compute"), errors("total"), errors("weights")
    return Summary(
        records=len(outcomes),
        expressible=len(ok),
        kv=(sum(abs(e) <= 0.01 for e in kv), len(kv)),
        compute=(sum(abs(e) <= 0.15 for e in cp), sum(e < -0.15 for e in cp), len(cp)),
        totals=(sum(abs(e) <= 0.03 for e in tot), len(tot)),
        worst_compute=min(cp, default=None),
        weights=(sum(abs(e) <= 0.005 for e in wt), len(wt)),
    )


def _pct(e: float | None) -> str:
    return "-" if e is None else f"{e * 100:+.1f} %"


def markdown(outcomes: list[Outcome]) -> str:
    s = summarize(outcomes)
    lines = [
        f"{s.records} public start-up logs (tests/truth/records), {s.expressible} expressible "
        "as a spec today:",
        "",
        f"- weights within ±0.5 %: {s.weights[0]} of {s.weights[1]} buffers (a log prints "
        "type counts, not each tensor's type: records pin the types their counts or the "
        "quantizer's recipe say, `model.types`)",
        f"- KV within ±1 %: {s.kv[0]} of {s.kv[1]} buffers",
        f"- compute within ±15 %: {s.compute[0]} of {s.compute[2]} buffers; "
        f"below -15 % (the OOM side): {s.compute[1]}; worst {_pct(s.worst_compute)}",
        f"- per-GPU totals (logged weights + planned KV and compute) within ±3 %: "
        f"{s.totals[0]} of {s.totals[1]}",
        "",
        "| record | runtime | build | arch | GPUs | KV | compute (per buffer) | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.reason is not None:
            lines.append(
                f"| {o.id} | {o.runtime} | {o.build or '-'} | {o.arch} | {o.gpus} | | | "
                f"{'' if o.reason.startswith('refused') else 'not expressible: '}{o.reason} |"
            )
            continue
        kv = ", ".join(f"{r.buffer} {_pct(r.error)}" for r in o.rows if r.field == "kv")
        cp = ", ".join(f"{r.buffer} {_pct(r.error)}" for r in o.rows if r.field == "compute")
        lines.append(
            f"| {o.id} | {o.runtime} | {o.build or '-'} | {o.arch} | {o.gpus} | {kv} | {cp} | "
            f"{'; '.join(o.notes)} |"
        )
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- truth-table:begin -->", "<!-- truth-table:end -->"
#: the page that shows the table (it moved out of README.md with the docs site, issue 32)
DOCS_PAGE = ROOT / "docs" / "explanation" / "accuracy.md"


def rewrite_readme(text: str, table: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main(argv: list[str]) -> int:
    if "--holdout" in argv:  # the held-out logs' figures (tests/truth/holdout_report.py)
        from tests.truth.holdout_report import report

        sys.stdout.write(report())
        return 0
    outcomes = evaluate_all()
    table = markdown(outcomes)
    if "--docs" in argv or "--readme" in argv:
        page = DOCS_PAGE
        page.write_text(rewrite_readme(page.read_text(), table))
    sys.stdout.write(table)
    return 0


def rows_of(outcomes: list[Outcome]) -> Iterator[tuple[Outcome, Row]]:
    for o in outcomes:
        for r in o.rows:
            yield o, r


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
