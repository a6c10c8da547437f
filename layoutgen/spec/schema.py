"""The spec schema: the only pydantic models in layoutgen.

A spec describes one host, the models on it, the runtimes that serve them and
the services to run.  Everything is ``extra="forbid"`` and frozen: a typo is
an error, not a silently ignored key.  Fields a role provides a default for
are ``None`` here ("not written"); :mod:`layoutgen.spec.roles` fills them and
remembers where each value came from, so ``validate --explain`` can say.

Field descriptions double as help: they appear in the JSON Schema (editor
hovers) and in "missing key" messages.
"""

from __future__ import annotations

import datetime
import re
import warnings
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from layoutgen import runtimes
from layoutgen.core.rules import parse_version
from layoutgen.core.runtime import Runtime as RuntimeRules
from layoutgen.inputs import literals
from layoutgen.spec.sizes import SIZE_PATTERN, parse_size
from layoutgen.speed import hardware

SCHEMA_VERSION = 1


def _size(value: object) -> int:
    return parse_size(value)


Size = Annotated[
    int,
    BeforeValidator(_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": SIZE_PATTERN},
            ],
            "description": "bytes, or a number with a unit: 96GiB, 97247MiB, 8GB",
        }
    ),
]


def _bandwidth(value: object) -> int:
    """Bytes a second: ``460GB/s``, ``460GiB/s``, or a size without ``/s`` (read as a
    second's worth: ``460GB`` and ``460000000000`` mean the same)."""
    if isinstance(value, str) and value.rstrip().endswith("/s"):
        value = value.rstrip()[:-2]
    return parse_size(value)


Bandwidth = Annotated[
    int,
    BeforeValidator(_bandwidth),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": SIZE_PATTERN.replace(r")\s*$", r")(/s)?\s*$")},
            ],
            "description": "bytes a second, or a size a second: 460GB/s, 1792GB/s, 430GiB/s",
        }
    ),
]


def _cpu_model(value: str) -> str:
    if value not in hardware.CPUS:
        raise ValueError(
            f"unknown CPU model {value!r}; known: {', '.join(sorted(hardware.CPUS))} "
            "(or leave it out and give host.memory_bandwidth)"
        )
    return value


CpuModel = Annotated[
    str,
    AfterValidator(_cpu_model),
    WithJsonSchema({"type": "string", "enum": sorted(hardware.CPUS)}),
]


def _schedule(value: str) -> str:
    from layoutgen.speed import contention  # only specs with a schedule pay its import

    try:
        contention.parse_windows(value)
    except contention.WindowError as exc:
        raise ValueError(f'{exc} (several windows: "22:00-06:00, 12:00-13:00"; quoted)') from None
    return value


# Every pattern is used with ``fullmatch``: ``$`` alone would accept a
# trailing newline, and a name ending in "\n" breaks scripts and units.
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def _name(value: object) -> object:
    # Service and host names become file, unit and container names.
    if isinstance(value, str) and not _NAME.fullmatch(value):
        raise ValueError(
            f"{literals.clip(value)} is not a valid name: use lowercase letters, digits and '-', "
            "starting with a letter or digit (it becomes file, unit and container names)"
        )
    return value


def _ident(value: object) -> object:
    if isinstance(value, str) and not _ID.fullmatch(value):
        raise ValueError(
            f"{literals.clip(value)} is not a valid id: use letters, digits, '_', '.' and '-', "
            "starting with a letter or digit"
        )
    return value


#: Capabilities a service may add, and why an inference server would want each.
#: Anything else (ALL, SYS_ADMIN, NET_ADMIN, ...) widens what a compromised server
#: can do to the host far beyond what serving a model needs, so it is refused.
CAPABILITIES = {
    "SYS_NICE": "raise thread priority and set NUMA/CPU affinity (seed 001's --cap-add)",
    "IPC_LOCK": "lock weights in RAM (--mlock) beyond the memlock limit",
    "SYS_RESOURCE": "raise resource limits such as RLIMIT_MEMLOCK from inside",
}


def _capability(value: object) -> object:
    if not isinstance(value, str):
        return value
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*", value):
        fixed = value.strip().upper().removeprefix("CAP_")
        raise ValueError(
            f"{literals.clip(value)} is not a capability name: write it in upper case without "
            f"CAP_, like {literals.clip(fixed)}"
        )
    if value not in CAPABILITIES:
        allowed = ", ".join(sorted(CAPABILITIES))
        raise ValueError(
            f"capability {literals.clip(value)} is not allowed: an inference server needs at most "
            f"{allowed}; remove it (layoutgen never grants broader privileges)"
        )
    return value


def _version(value: object) -> object:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # 5.4 written unquoted is a float in YAML
    if isinstance(value, str) and not re.fullmatch(r"\d{1,4}\.\d{1,4}(\.\d{1,4})?", value):
        raise ValueError(f"{literals.clip(value)} is not a version: write MAJOR.MINOR, e.g. '5.4'")
    return value


Name = Annotated[str, BeforeValidator(_name)]
Ident = Annotated[str, BeforeValidator(_ident)]
# Strings by where they land (see layoutgen.inputs.literals): each refuses what its
# formats cannot carry literally.
Text = Annotated[str, AfterValidator(literals.text)]
HostPath = Annotated[str, AfterValidator(literals.host_path)]
MountedFile = Annotated[str, AfterValidator(literals.mounted_file)]
Image = Annotated[str, AfterValidator(literals.image)]
SecretName = Annotated[str, AfterValidator(literals.secret)]
DeviceName = Annotated[str, AfterValidator(literals.device)]
BufferName = Annotated[str, AfterValidator(literals.buffer)]
GpuUuid = Annotated[str, AfterValidator(literals.gpu_uuid)]

#: Bounds by what a field can mean: no model has more layers (profiles: 4,096),
#: no host more cores or GPUs, no context more than 2**30 tokens.  Beyond
#: them a number is a typo or an attack, and later arithmetic (a range() of a
#: million layers, a 400-digit product) is never reached.
MAX_LAYER = 4095
MAX_TOKENS = 1 << 30
MAX_THREADS = 8192
LAYER_RANGE = re.compile(r"[ ]*(\d{1,6})[ ]*-[ ]*(\d{1,6})[ ]*")


def _layers(value: object) -> object:
    """Accept ``[3, 4, 10-12]``: numbers and inclusive ``a-b`` ranges."""
    if not isinstance(value, list):
        return value
    out: list[object] = []
    for item in value:
        if isinstance(item, str):
            m = LAYER_RANGE.fullmatch(item)
            if m is None:
                raise ValueError(
                    f"cannot read layer {item!r}: write a layer number (12) "
                    "or an inclusive range ('3-10')"
                )
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi > MAX_LAYER:
                raise ValueError(f"layer {hi} in {item!r} is beyond any model: at most {MAX_LAYER}")
            if lo > hi:
                raise ValueError(f"layer range {item!r} runs backwards: write '{hi}-{lo}'")
            out.extend(range(lo, hi + 1))
        else:
            out.append(item)
    return out


LayerList = Annotated[
    tuple[Annotated[int, Field(ge=0, le=MAX_LAYER)], ...],
    BeforeValidator(_layers),
    WithJsonSchema(
        {
            "type": "array",
            "items": {
                "anyOf": [
                    {"type": "integer", "minimum": 0},
                    {"type": "string", "pattern": r"^\s*\d+\s*-\s*\d+\s*$"},
                ]
            },
        }
    ),
]

KVType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1", "q6_0"]
Role = Literal["orchestrator", "worker", "batch", "embedding"]
RuntimeKind = Literal["llama.cpp", "ik_llama.cpp", "vllm"]
HeatPolicy = Literal["head-tail", "head", "tail", "even", "speed"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------- host


CpuIsa = Literal["x86-64", "x86-64-v3", "x86-64-v4", "x86-64-v4-amx", "aarch64", "aarch64-v8.0"]


class Cpu(Strict):
    cores: int = Field(ge=1, le=MAX_THREADS, description="physical cores, e.g. 16")
    threads: int = Field(ge=1, le=MAX_THREADS, description="hardware threads (SMT), e.g. 32")
    isa: CpuIsa = Field(
        default="x86-64-v3",
        description=(
            "instruction set level, which decides the weights llama.cpp repacks into "
            "CPU_REPACK: x86-64-v3 (AVX2, default), x86-64-v4 (AVX-512), x86-64-v4-amx "
            "(AVX-512 with AMX, Xeon Sapphire Rapids and later: matrices of some types "
            "are copied into an AMX buffer), x86-64 (neither), aarch64 (NEON with the dot "
            "product, Armv8.2 and later: Neoverse, Graviton 2+, Apple M), aarch64-v8.0 (NEON "
            "without it: Cortex-A53/A72, Raspberry Pi 3/4; llama.cpp repacks nothing)"
        ),
    )
    model: CpuModel | None = Field(
        default=None,
        description="CPU model from layoutgen's table, e.g. 'EPYC 9175F': gives the host "
        "RAM bandwidth (channels x MT/s x 8 bytes, per socket) and FLOPs for the plan's "
        "speed estimate",
    )
    sockets: int = Field(
        default=1,
        ge=1,
        le=8,
        description="CPU packages (lscpu 'Socket(s)'), e.g. 2 on a dual EPYC; cores and "
        "threads count every socket's, and cpu.model's bandwidth and FLOPs are per socket",
    )
    numa_nodes: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="NUMA nodes the OS shows (lscpu 'NUMA node(s)', "
        "/sys/devices/system/node/node*): sockets x the BIOS's NPS (EPYC) or SNC (Xeon) "
        "setting, e.g. 8 on a dual EPYC at NPS4, 1 at NPS0 (the hardware interleaves "
        "every socket's memory); default: one a socket. The speed model "
        "reads host RAM by where a service's pages sit on them (docs: speed)",
    )
    socket_link: Bandwidth | None = Field(
        default=None,
        description="bytes/s one way between two sockets (AMD xGMI, Intel UPI), e.g. "
        "256GB/s for four xGMI3 x16 links at 32 Gbps; caps what a decode reads across "
        "sockets; default: cpu.model's table figure where one is sourced, else not "
        "limited (the plan says so)",
    )

    @model_validator(mode="after")
    def _threads_cover_cores(self) -> Cpu:
        if self.threads < self.cores:
            raise ValueError(
                f"threads ({self.threads}) cannot be fewer than cores ({self.cores}); "
                f"write threads: {self.cores} without SMT, {2 * self.cores} with it"
            )
        nodes = self.nodes
        if nodes != 1 and nodes % self.sockets:
            raise ValueError(
                f"numa_nodes ({nodes}) must be 1 (NPS0: one node over every socket) or a "
                f"multiple of sockets ({self.sockets}): each socket has the same number of "
                "nodes (NPS1/2/4, SNC2/3)"
            )
        if nodes > self.cores:
            raise ValueError(
                f"numa_nodes ({nodes}) cannot exceed cores ({self.cores}): every node has "
                "cores of its own"
            )
        return self

    @property
    def nodes(self) -> int:
        """NUMA nodes: as written, else one a socket."""
        return self.numa_nodes if self.numa_nodes is not None else self.sockets


Endpoint = Annotated[str, AfterValidator(literals.endpoint)]


class Rpc(Strict):
    """A device served over the network by llama.cpp's ``ggml-rpc-server``."""

    endpoint: Endpoint = Field(
        description="HOST:PORT the server listens on and clients connect to, e.g. "
        "127.0.0.1:50052; anything but loopback draws a warning (the protocol has no "
        "authentication)"
    )
    binary: HostPath = Field(description="absolute path of ggml-rpc-server on the serving host")
    device: DeviceName = Field(
        description="the one backend device the server exports (ggml-rpc-server -d), as "
        "that host's llama.cpp names it: CUDA0, CUDA1, ... or CPU"
    )
    served_by: Name | None = Field(
        default=None,
        description="host that runs the server (its unit goes to out/<served_by>/); "
        "this host when absent",
    )
    private_link: bool = Field(
        default=False,
        description="true: the endpoint's private address is on a link only the client "
        "can reach (a direct cable, a VLAN of the two hosts), said in so many words: no "
        "open-network warning; a public address is refused",
    )


class Gpu(Strict):
    id: Ident = Field(description="the name services use for this GPU, e.g. gpu0")
    index: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description="NVML/CDI index (nvidia.com/gpu=INDEX) of a local GPU",
    )
    vram: Size = Field(
        description="total memory as NVML reports it, e.g. 97247MiB (for an rpc device: "
        "what the server may use; ggml-rpc-server cannot advertise it)"
    )
    reserve: Size = Field(description="memory layoutgen must leave free (display, other users)")
    name: Text | None = Field(
        default=None,
        description="model name as NVML reports it; a name from layoutgen's GPU table "
        "(e.g. 'NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition') gives its bandwidth",
    )
    bandwidth: Bandwidth | None = Field(
        default=None,
        description="peak memory bandwidth, e.g. 1792GB/s; default: from the GPU table by "
        "'name'; used only for the plan's speed estimate",
    )
    uuid: GpuUuid | None = Field(
        default=None,
        description="NVML UUID of a local GPU (layoutgen probe prints it): the rendered "
        "units then name the card by UUID (nvidia.com/gpu=GPU-...), so the layout follows "
        "the card when indices change, and doctor checks the card is there",
    )
    rpc: Rpc | None = Field(
        default=None, description="a remote device served by ggml-rpc-server instead of a local GPU"
    )

    @model_validator(mode="after")
    def _local_or_rpc(self) -> Gpu:
        if (self.index is None) == (self.rpc is None):
            raise ValueError(
                "give exactly one of 'index' (the NVML index of a local GPU) or 'rpc' "
                "(a device served by ggml-rpc-server)"
            )
        if self.uuid is not None and self.rpc is not None:
            raise ValueError(
                "'uuid' names a local GPU; an rpc device is another host's: remove 'uuid'"
            )
        return self


Target = Literal["podman", "quadlet", "systemd"]
TARGETS: tuple[Target, ...] = ("podman", "quadlet", "systemd")


class GitOps(Strict):
    """issue 34: a pull timer that fetches the spec's repository and applies it."""

    repo: Text = Field(description="the git repository to fetch (a URL or a path on the host)")
    branch: Text = Field(default="main", description="the branch to follow")
    spec: Text = Field(description="the spec's path inside the repository, e.g. layouts/tower.yaml")
    interval: Annotated[str, AfterValidator(literals.text)] = Field(
        default="5min",
        pattern=r"^[0-9]+(s|min|h|d)$",
        description="how often the timer fetches, as systemd writes a time span (30s, 5min, 1h)",
    )


class Deploy(Strict):
    """issue 34: how ``layoutgen apply`` installs this host's units."""

    scope: Literal["system", "user"] = Field(
        default="system",
        description="system: rootful units (/etc/containers/systemd, /etc/systemd/system; "
        "apply runs as root); user: rootless units of the user who runs apply "
        "(~/.config/containers/systemd, ~/.config/systemd/user)",
    )
    keep: int = Field(
        default=10, ge=2, le=1000, description="generations kept by apply; older ones are pruned"
    )


class Host(Strict):
    name: Name = Field(description="host name; rendered files go to out/<name>/")
    cpu: Cpu = Field(description="CPU topology: cores and threads")
    ram: Size = Field(description="installed RAM, e.g. 768GiB")
    ram_reserve: Size = Field(description="RAM kept for the OS and everything else, e.g. 32GiB")
    gpus: tuple[Gpu, ...] = Field(
        default=(), max_length=64, description="GPUs; empty for a CPU-only host"
    )
    gpu_overhead: Size = Field(
        default=1024**3,
        description="GPU memory each server process takes beyond its logged buffers (CUDA "
        "context, cuBLAS workspace, ggml-cuda's pool), per GPU. Not written: by the GPU's "
        "class from its name (layoutgen.solve.overhead, sourced): 512MiB up to Ada (GeForce "
        "10-40, RTX A/Ada, T4, L4/L40), 768MiB for A100/H100/H200, 1GiB for Blackwell and "
        "for a GPU not named; vLLM services take this field's value, 1GiB unless written",
    )
    podman: Annotated[str | None, BeforeValidator(_version)] = Field(
        default=None,
        description="podman version on the host (podman --version), e.g. '5.4'; decides "
        "which quadlet keys are rendered; needed for quadlet units of container services",
    )
    memory_bandwidth: Bandwidth | None = Field(
        default=None,
        description="peak host RAM bandwidth, e.g. 614GB/s (12 x DDR5-6400 x 8 bytes), "
        "which the speed model multiplies by host RAM's efficiency; default: from "
        "cpu.model; with it the plan estimates decode speed. A figure you measured (mlc, "
        "STREAM) goes in memory_bandwidth_measured instead",
    )
    memory_bandwidth_measured: Bandwidth | None = Field(
        default=None,
        description="host RAM bandwidth you measured (mlc --max_bandwidth, STREAM triad), "
        "e.g. 460GB/s: the speed model reads host RAM at that figure (efficiency 1: a "
        "measured figure is what decode can reach, no peak's efficiency applies); give "
        "it or memory_bandwidth, not both",
    )
    efficiency: float | None = Field(
        default=None,
        gt=0,
        le=2,
        allow_inf_nan=False,
        description="host RAM's fitted efficiency: decode's effective bandwidth over the "
        "bandwidth given (the peak, or memory_bandwidth_measured); default a prior per "
        "kind of figure (layoutgen.solve.plan_speed); layoutgen calibrate fits it",
    )
    gpu_efficiency: float | None = Field(
        default=None,
        gt=0,
        le=2,
        allow_inf_nan=False,
        description="GPU memory's fitted efficiency (effective / peak bandwidth, every "
        "GPU); default a prior from full-GPU results (layoutgen.solve.plan_speed); "
        "layoutgen calibrate fits it on a service that keeps nothing in host RAM",
    )
    targets: tuple[Target, ...] = Field(
        default=TARGETS,
        min_length=1,
        description="what render writes: podman (run scripts), quadlet (.container "
        "units), systemd (plain .service units); default all three",
    )
    deploy: Deploy = Field(
        default_factory=Deploy,
        description="layoutgen apply: rootful or rootless units, generations kept",
    )
    gitops: GitOps | None = Field(
        default=None,
        description="opt-in pull deployment: a layoutgen-pull.service and .timer that fetch "
        "the repository, check the commit is a fast-forward of the deployed one, and apply",
    )

    @model_validator(mode="after")
    def _one_host_bandwidth(self) -> Host:
        if self.memory_bandwidth is not None and self.memory_bandwidth_measured is not None:
            raise ValueError(
                "give one of memory_bandwidth (a peak, which host RAM's efficiency scales) "
                "or memory_bandwidth_measured (a figure you measured, taken as it is); "
                "remove the other"
            )
        return self


# ------------------------------------------------------------------ models


class Model(Strict):
    path: MountedFile = Field(
        description="absolute path of the GGUF on the host (first shard of a split model), "
        "or of a Hugging Face checkpoint's directory (vllm), in a directory of its own: "
        "containers mount that directory read-only"
    )
    profile: Text = Field(description="model profile file, relative to this spec")
    heat: Text | None = Field(
        default=None,
        description="expert heat per MoE layer, relative to this spec: a YAML file "
        "(schema: 1, source, layers: {N: count}) or a llama-imatrix GGUF with routing "
        "counts; read by the speed model and by 'experts: {mode: auto, policy: speed}' "
        "(not given: the architecture's prior, uniform for most)",
    )


class Runtime(Strict):
    kind: RuntimeKind = Field(description="llama.cpp, ik_llama.cpp or vllm")
    image: Image | None = Field(
        default=None, description="container image to run: [REGISTRY/]NAME[:TAG][@DIGEST]"
    )
    binary: HostPath | None = Field(default=None, description="absolute path of a native server")
    version: str | None = Field(
        default=None,
        max_length=64,
        description=(
            "the build the image or binary runs, as its --version prints it (llama.cpp "
            "b6123 or 6123, ik_llama.cpp 4327) or its commit date (2026-03-20); vllm: "
            "the release (0.11.0); selects the runtime's dated rules. Not given: the "
            "newest rules, said in the plan"
        ),
    )

    sched_copies: int = Field(
        default=4,
        ge=1,
        le=8,
        description=(
            "GGML_SCHED_MAX_COPIES the binary was built with (4 by default): over several "
            "GPUs pipeline parallelism keeps this many copies of every graph input; the "
            "start-up log prints it as n_copies"
        ),
    )

    blas: bool = Field(
        default=False,
        description=(
            "llama.cpp built with a BLAS library (GGML_BLAS=ON, e.g. OpenBLAS): matrix "
            "multiplications of host weights from 32 tokens run on BLAS instead of the "
            "first GPU, in a compute buffer of its own named CPU beside CUDA_Host"
        ),
    )

    @field_validator("version", mode="before")
    @classmethod
    def _as_written(cls, value: object) -> object:
        """``version: 4327`` and ``version: 2026-03-20`` unquoted read as int and date."""
        if isinstance(value, datetime.date) or (
            isinstance(value, int) and not isinstance(value, bool)
        ):
            return str(value)
        return value

    @field_validator("version")
    @classmethod
    def _a_build(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A build as the runtime's kind writes it (vLLM: a release, 0.11.0)."""
        if value is not None:
            kind = info.data.get("kind")
            if kind is None:
                parse_version(value)
            else:
                runtimes.get(kind, value)
        return value

    def rules(self) -> RuntimeRules:
        """The runtime at this version: everything it decides (layoutgen.runtimes)."""
        return runtimes.get(self.kind, self.version, self.sched_copies, self.blas)

    @model_validator(mode="after")
    def _blas_on_llama_cpp(self) -> Runtime:
        if self.blas and self.kind != "llama.cpp":
            raise ValueError(
                f"blas: a BLAS build's buffers are planned for llama.cpp only, not "
                f"{self.kind}; remove 'blas'"
            )
        return self

    @model_validator(mode="after")
    def _one_of_image_or_binary(self) -> Runtime:
        if (self.image is None) == (self.binary is None):
            raise ValueError(
                "give exactly one of 'image' (a container image) or 'binary' "
                "(an absolute path of a native server)"
            )
        return self


# ------------------------------------------------------------------ experts


class ExpertsAuto(Strict):
    """Fill the VRAM left after fixed services with expert layers, hottest first."""

    mode: Literal["auto"] = "auto"
    policy: HeatPolicy = Field(
        default="speed",
        description="which expert layers go to the GPUs first: speed (the default: by the "
        "model's heat, models.<id>.heat or its architecture's prior, the order that "
        "maximises predicted decode speed; ties, as with uniform heat, in head-tail "
        "order), or a fixed order: head-tail (seed 001's hand rule), head, tail, even",
    )
    max_layers: int | None = Field(
        default=None, ge=0, le=MAX_LAYER + 1, description="at most this many expert layers on GPUs"
    )


class ExpertsHost(Strict):
    """Every expert tensor in host RAM (--cpu-moe)."""

    mode: Literal["host"] = "host"


class ExpertsGpu(Strict):
    """Experts stay with their layers on the GPUs (a fully resident model)."""

    mode: Literal["gpu"] = "gpu"


class ExpertsNCpuMoe(Strict):
    """The experts of the first ``n`` layers in host RAM (--n-cpu-moe N)."""

    mode: Literal["n-cpu-moe"] = "n-cpu-moe"
    n: int = Field(
        ge=0, le=MAX_LAYER + 1, description="layers 0..n-1 keep their experts in host RAM"
    )


#: one routed-expert tensor by its GGUF name (``.weight`` optional)
EXPERT_TENSOR = re.compile(r"blk\.(\d{1,4})\.ffn_(up|gate|down|gate_up)_exps(\.weight)?")


def _expert_tensor(value: str) -> str:
    m = EXPERT_TENSOR.fullmatch(value)
    if m is None:
        raise ValueError(
            f"{literals.clip(value)} is not a routed-expert tensor: write its name as in the "
            "GGUF, e.g. 'blk.12.ffn_down_exps' (kinds: up, gate, down, gate_up)"
        )
    return value if value.endswith(".weight") else value + ".weight"


ExpertTensor = Annotated[str, AfterValidator(_expert_tensor)]


class ExpertsExplicit(Strict):
    """Expert layers (or single expert tensors) pinned per GPU id; every other expert
    tensor stays in host RAM."""

    mode: Literal["explicit"] = "explicit"
    layers: dict[Ident, LayerList] = Field(
        default_factory=dict, description="GPU id → expert layers, e.g. {gpu0: [3-10, 20, 30]}"
    )
    tensors: dict[Ident, tuple[ExpertTensor, ...]] = Field(
        default_factory=dict,
        description="GPU id → single expert tensors, e.g. {gpu1: [blk.11.ffn_down_exps]}",
    )

    @model_validator(mode="after")
    def _something(self) -> ExpertsExplicit:
        if not self.layers and not self.tensors:
            raise ValueError("give 'layers' or 'tensors' (GPU id → what it holds)")
        return self


def _experts_shorthand(value: object) -> object:
    # 'experts: host' is short for '{mode: host}'; modes with required keys
    # ('n-cpu-moe', 'explicit') then report those keys as missing.
    if isinstance(value, str):
        return {"mode": value}
    return value


Experts = Annotated[
    ExpertsAuto | ExpertsHost | ExpertsGpu | ExpertsNCpuMoe | ExpertsExplicit,
    Field(discriminator="mode"),
    BeforeValidator(_experts_shorthand),
]

EXPERT_MODES = ("auto", "host", "gpu", "n-cpu-moe", "explicit")


# ------------------------------------------------------------ tensor overrides


def _override_pattern(value: str) -> str:
    """An ``-ot`` pattern: a regex llama.cpp can take in one ``PATTERN=BUFFER`` word."""
    for ch, why in ((",", "separates rules"), ("=", "separates the pattern from the buffer")):
        if ch in value:
            raise ValueError(
                f"pattern {literals.clip(value)} contains {ch!r}, which in an -ot value {why}; "
                "rewrite it without (a{1,3} as (a|aa|aaa), or use a character class)"
            )
    if not value:
        raise ValueError("an empty pattern matches every tensor; name the tensors to move")
    try:
        with warnings.catch_warnings():  # '[[' warns; spec.patterns refuses it, located
            warnings.simplefilter("ignore")
            re.compile(value)
    except re.error as exc:
        raise ValueError(f"pattern {literals.clip(value)} is not a regex: {exc}") from None
    except RecursionError:  # Python's parser recurses per group: '(' * 500
        raise ValueError(f"pattern {literals.clip(value)} nests groups too deep") from None
    return value


class TensorOverride(Strict):
    """One ``-ot PATTERN=BUFFER`` rule: tensors whose name the regex is found in go to
    ``device``; the first rule that matches wins, as in the runtime."""

    pattern: Annotated[str, AfterValidator(literals.text), AfterValidator(_override_pattern)] = (
        Field(
            max_length=1024,
            description=r"a regex searched in each tensor name, e.g. 'blk\.1[2-9]\.ffn_.*'",
        )
    )
    device: Ident = Field(description="'host' (host RAM, the CPU buffer) or one of the GPU ids")


# ----------------------------------------------------------------- services


class ApiKey(Strict):
    """Where the server's API key comes from; never written into rendered files."""

    secret: SecretName | None = Field(
        default=None, description="a podman secret, mounted at /run/secrets/api-key"
    )
    file: MountedFile | None = Field(
        default=None, description="an absolute host path: keys one per line, mounted read-only"
    )
    env_file: HostPath | None = Field(
        default=None, description="an absolute host path with LLAMA_API_KEY=... (llama.cpp only)"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ApiKey:
        given = [k for k in ("secret", "file", "env_file") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'secret' (a podman secret name), 'file' (a host file "
                "with the keys) or 'env_file' (a host file with LLAMA_API_KEY=...)"
            )
        return self


class Measured(Strict):
    """Buffer sizes measured from a runtime's start-up log (``layoutgen calibrate``)."""

    weights: Size | None = None
    kv: Size | None = None
    compute: Size | None = None


KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
#: words in an environment name that mark a secret: those go through api_key
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
ENV_PREFIXES = ("VLLM_", "CUDA_", "NCCL_", "PYTORCH_")
#: set by layoutgen itself (CDI devices are renumbered in CUDA_DEVICE_ORDER)
ENV_OWNED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "VLLM_API_KEY")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,127}")
_ENV_VALUE = re.compile(r"[A-Za-z0-9_.,:/+=@-]{0,256}")
_SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")


def _env_name(value: object) -> object:
    if not isinstance(value, str):
        return value
    if not _ENV_NAME.fullmatch(value) or not value.startswith(ENV_PREFIXES):
        raise ValueError(
            f"{literals.clip(value)} is not a variable layoutgen passes: write an upper-case "
            f"name starting with {', '.join(ENV_PREFIXES)}"
        )
    if value in ENV_OWNED:
        raise ValueError(f"{value} is set by layoutgen (GPUs from 'gpus:', the key from api_key)")
    word = next((w for w in SECRET_WORDS if w in value), None)
    if word is not None:
        raise ValueError(
            f"{value} looks like a secret (it holds {word}), and every value here is written "
            "into the rendered files; pass secrets as podman secrets (api_key: {secret: NAME})"
        )
    return value


def _env_value(value: object) -> object:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and not _ENV_VALUE.fullmatch(value):
        raise ValueError(
            f"{literals.clip(value)} cannot be written literally into a unit and a script: use "
            "letters, digits and _ . , : / + = @ - (at most 256)"
        )
    return value


def _served_name(value: str) -> str:
    if not _SERVED_NAME.fullmatch(value):
        raise ValueError(
            f"{literals.clip(value)} is not a model name: use letters, digits and _ . : / -, "
            "starting with a letter or digit"
        )
    return value


EnvName = Annotated[str, BeforeValidator(_env_name)]
EnvValue = Annotated[str, BeforeValidator(_env_value)]
ServedName = Annotated[str, AfterValidator(_served_name)]


#: vLLM accepts these --max-lora-rank values only (vllm/config/lora.py of 0.11.0:
#: possible_max_ranks)
LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
_CLOCK = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


def _clock(value: str) -> str:
    if not _CLOCK.fullmatch(value):
        raise ValueError(
            f"{literals.clip(value)} is not a time of day: write HH:MM on a 24-hour clock, "
            'e.g. "04:00" (quoted: YAML reads 04:00 unquoted as a number)'
        )
    return value


def _lora_rank(value: int) -> int:
    if value not in LORA_RANKS:
        raise ValueError(
            f"vLLM accepts max_lora_rank {', '.join(map(str, LORA_RANKS))} only; write the "
            f"smallest that covers your adapters' rank r"
        )
    return value


class LoraUpdate(Strict):
    """A daily update: the newest adapter in ``dir`` replaces the running one, checked
    first (same base model, rank within max_lora_rank)."""

    dir: MountedFile = Field(
        description="absolute host directory the trainer writes adapters into, one "
        "sub-directory per adapter (PEFT: adapter_config.json + weights); the newest wins"
    )
    at: Annotated[str, AfterValidator(_clock)] = Field(
        description='time of day the check runs (a systemd timer), e.g. "04:00"'
    )
    apply: Literal["load", "restart"] = Field(
        default="load",
        description="load: through vLLM's /v1/load_lora_adapter, without a restart "
        "(sets VLLM_ALLOW_RUNTIME_LORA_UPDATING); restart: restart the service",
    )


class LoraAdapter(Strict):
    """One LoRA adapter the service serves (vLLM: by name; llama.cpp: always applied)."""

    name: Name = Field(description="the name clients ask for (vLLM --lora-modules NAME=...)")
    path: MountedFile = Field(
        description="vllm: the adapter's host directory (adapter_config.json and weights), "
        "mounted read-only at /adapters/NAME; llama.cpp: the adapter's GGUF file. With "
        "'update:' the update keeps this path a symbolic link to the newest adapter checked"
    )
    rank: int | None = Field(
        default=None, ge=1, le=4096, description="the adapter's rank r, if known: checked here"
    )
    base_model: Text | None = Field(
        default=None,
        max_length=256,
        description="base_model_name_or_path of its adapter_config.json, if known: checked "
        "here against the service's model",
    )
    size: Size | None = Field(
        default=None,
        description="llama.cpp: the adapter GGUF's tensor bytes; read from its header "
        "when the file is readable",
    )
    scale: float | None = Field(
        default=None,
        gt=0,
        le=100,
        allow_inf_nan=False,
        description="llama.cpp: --lora-scaled FILE SCALE (default 1: --lora FILE)",
    )
    update: LoraUpdate | None = Field(
        default=None, description="vllm: replace it daily with the newest adapter in a directory"
    )


class Lora(Strict):
    """LoRA adapters and the GPU memory vLLM pre-allocates for them."""

    adapters: tuple[LoraAdapter, ...] = Field(
        min_length=1, max_length=64, description="[{name, path}, ...]"
    )
    max_loras: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="vllm: --max-loras, adapters in one batch (GPU slots); default 1",
    )
    max_lora_rank: Annotated[int, AfterValidator(_lora_rank)] | None = Field(
        default=None,
        description="vllm: --max-lora-rank (8, 16, 32, 64, 128, 256, 320 or 512): every "
        "slot is allocated at this rank; default 16. Adapters of a higher rank are refused",
    )
    max_cpu_loras: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="vllm: --max-cpu-loras, adapters cached in host RAM; default max_loras",
    )
    base_model: Text | None = Field(
        default=None,
        max_length=256,
        description="the base model an adapter's base_model_name_or_path must name; default: "
        "the name of the model's checkpoint directory",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Lora:
        names = [a.name for a in self.adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"adapter {twice[0]!r} is listed twice; give each its own name")
        if self.max_cpu_loras is not None and self.max_cpu_loras < (self.max_loras or 1):
            raise ValueError(
                f"max_cpu_loras ({self.max_cpu_loras}) is below max_loras "
                f"({self.max_loras or 1}), which vLLM refuses; write max_cpu_loras: "
                f"{self.max_loras or 1} or more"
            )
        return self


class Speculative(Strict):
    """Speculative decoding (vLLM ``--speculative-config``)."""

    method: Literal["mtp", "draft"] = Field(
        description="mtp: the checkpoint's own multi-token-prediction layers; draft: a "
        "smaller model from 'models:' proposes the tokens"
    )
    num_tokens: int = Field(ge=1, le=16, description="num_speculative_tokens, e.g. 3")
    model: Ident | None = Field(
        default=None, description="draft: the draft model's id under 'models:'"
    )
    acceptance: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="speed estimate only: the chance the target accepts each drafted "
        "token, given the ones before it were (default 0.78, from seed 004's MTP; "
        "club-3090's Qwen3.6-27B MTP 3 logs a mean acceptance length of 2.94, about 0.79); "
        "from vLLM's 'Mean acceptance length' L of N drafts, the a with 1 + a + ... + a^N = L",
    )

    @model_validator(mode="after")
    def _model_for_draft(self) -> Speculative:
        if self.method == "draft" and self.model is None:
            raise ValueError("method draft needs 'model:' (the draft model's id under 'models:')")
        if self.method == "mtp" and self.model is not None:
            raise ValueError("method mtp uses the checkpoint's own MTP layers: remove 'model:'")
        return self


class Draft(Strict):
    """A draft model for speculative decoding on llama.cpp (``-md``).

    llama.cpp 11434 loads it with the target's model parameters but the draft's
    devices, layers and overrides, and gives its context the target's n_ctx,
    slots, batch sizes and the draft's cache types (common/speculative.cpp
    ``common_base_params_to_speculative``, ``common_speculative_init_result``).
    """

    model: Ident = Field(description="the draft model's id under 'models:' (a GGUF profile)")
    acceptance: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="speed estimate only: the share of drafted tokens the target accepts, "
        "as llama-server logs it at the end of a request: 'draft acceptance = 0.xxxxx "
        "(a accepted / b generated)' (older builds: 'draft acceptance rate = ...'); read "
        "at the same max_tokens (the share falls as drafts grow longer); default: "
        "0.86 a drafted token given the ones before it were (public llama.cpp "
        "draft-model runs, greedy), which at 3 drafts logs as about 0.75",
    )

    @field_validator("acceptance", mode="before")
    @classmethod
    def _a_share(cls, v: object) -> object:
        if isinstance(v, int | float) and not isinstance(v, bool) and not 0 < v < 1:
            raise ValueError(
                f"{v} is not a share of the drafted tokens: write the number between 0 "
                "and 1 that llama-server logs as 'draft acceptance = 0.xxxxx'"
            )
        return v

    gpus: tuple[Ident, ...] | None = Field(
        default=None,
        description="GPU ids the draft's layers split over (-devd), among the service's "
        "(default: the service's GPUs); every layer is offloaded (-ngld)",
    )
    cache_type_k: KVType | None = Field(
        default=None, description="the draft's K cache type (-ctkd; default f16)"
    )
    cache_type_v: KVType | None = Field(
        default=None, description="the draft's V cache type (-ctvd; default f16)"
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="tokens drafted at most per step (--spec-draft-n-max; llama.cpp's default 3)",
    )


NumaPolicy = Literal["interleave", "bind"]


class Numa(Strict):
    """Where a service's memory and threads go on a host of several NUMA nodes,
    rendered as the unit's ``NUMAPolicy=``/``NUMAMask=`` (and ``CPUAffinity=numa`` for
    bind; systemd.exec(5)), which the server process, in a container too, inherits."""

    policy: NumaPolicy = Field(
        description="interleave: pages round-robin over the nodes, threads anywhere (what "
        "numactl --interleave=all gives); bind: memory and threads on the nodes (numactl "
        "-N n -m n): those nodes' bandwidth only, and a model larger than their memory "
        "does not load"
    )
    nodes: tuple[Annotated[int, Field(ge=0, le=63)], ...] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="NUMA node numbers, e.g. [0]; default: every node of the host "
        "(interleave only; bind names its nodes)",
    )

    @model_validator(mode="after")
    def _bind_names_nodes(self) -> Numa:
        if self.policy == "bind" and self.nodes is None:
            raise ValueError("policy bind needs 'nodes:', e.g. nodes: [0]")
        if self.nodes is not None and len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"nodes {list(self.nodes)} names a node twice")
        return self


class Service(Strict):
    model: Ident = Field(description="model id from 'models'")
    runtime: Ident = Field(description="runtime id from 'runtimes'")
    role: Role = Field(description="orchestrator, worker, batch or embedding; brings defaults")
    port: int = Field(ge=1, le=65535, description="TCP port the server listens on")
    ctx: int = Field(
        ge=0,
        le=MAX_TOKENS,
        description=(
            "context in tokens, total over all parallel slots; 0: the model's trained "
            "context (n_ctx_train of its profile), as -c 0 means to the runtime"
        ),
    )
    gpus: tuple[Ident, ...] | None = Field(
        default=None, description="GPU ids this service may use (role default otherwise)"
    )
    parallel: int | None = Field(default=None, ge=1, le=65536, description="slots (--parallel)")
    cache_type_k: KVType | None = Field(default=None, description="K cache type (-ctk)")
    cache_type_v: KVType | None = Field(default=None, description="V cache type (-ctv)")
    batch: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="logical batch size (-b)"
    )
    ubatch: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="physical batch size (-ub)"
    )
    threads: int | None = Field(
        default=None, ge=1, le=MAX_THREADS, description="generation threads (-t)"
    )
    threads_batch: int | None = Field(
        default=None, ge=1, le=MAX_THREADS, description="prompt-processing threads (-tb)"
    )
    experts: Experts | None = Field(default=None, description="where expert layers go")
    reasoning: bool | None = Field(
        default=None, description="allow thinking; false renders a zero reasoning budget"
    )
    mlock: bool | None = Field(default=None, description="lock weights in RAM (--mlock)")
    flash_attn: bool | None = Field(
        default=None,
        description=(
            "flash attention, rendered in the build's own form (ik_llama.cpp: -fa before "
            "3928, -no-fa to 3984, -fa on|off since; llama.cpp: -fa on|off); default: a "
            "-fa in 'args', else on with GPUs and off on the CPU alone"
        ),
    )
    tensor_split: dict[Ident, Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]] | None = (
        Field(
            default=None,
            description=(
                "-ts: the share of the layers each of the service's GPUs takes, by GPU id, "
                "e.g. {gpu0: 17, gpu1: 12}; default: each GPU's usable VRAM"
            ),
        )
    )
    split_mode: Literal["layer", "row"] = Field(
        default="layer",
        description=(
            "-sm over several GPUs: layer (each layer on one GPU) or row (every matrix "
            "split by rows over the GPUs by the tensor_split shares, in one CUDA_Split "
            "buffer; KV cache and compute on the first GPU); llama.cpp, and "
            "ik_llama.cpp before build 4035; dense models only"
        ),
    )
    tensor_overrides: tuple[TensorOverride, ...] = Field(
        default=(),
        max_length=256,
        description=(
            "-ot rules written by hand, before layoutgen's own expert rules: "
            "[{pattern: REGEX, device: host|GPU id}], first match wins"
        ),
    )
    gpu_layers: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LAYER + 1,
        description=(
            "layers on the GPUs, counted from the end (-ngl N); the rest run on the "
            "CPU; llama.cpp counts the output layer as one of N, ik_llama.cpp offloads "
            "it only when N exceeds the repeating layers; 0: every layer on the CPU, "
            "the GPUs only compute (big batches). Not given: every layer"
        ),
    )
    priority: int = Field(
        default=0,
        ge=-(2**31),
        le=2**31 - 1,
        description="among 'experts: auto' services, higher fills GPUs first",
    )
    expose: bool = Field(
        default=False,
        description="listen on all interfaces (0.0.0.0) instead of 127.0.0.1; validate warns",
    )
    after: tuple[Name, ...] = Field(default=(), description="services that must be up first")
    conflicts: tuple[Name, ...] = Field(
        default=(), description="services that never run at the same time as this one"
    )
    capabilities: tuple[Annotated[str, BeforeValidator(_capability)], ...] = Field(
        default=(), description="Linux capabilities to add, e.g. [SYS_NICE]"
    )
    args: tuple[Text, ...] = Field(
        max_length=1024, default=(), description="extra runtime arguments, passed through last"
    )
    measured: dict[BufferName, Measured] = Field(
        default_factory=dict,
        description="measured buffer sizes by runtime buffer name (CUDA0, CUDA_Host, ...)",
    )
    api_key: ApiKey | None = Field(
        default=None, description="require an API key, from a podman secret or a host file"
    )
    kv_cache_dtype: KvCacheDtype | None = Field(
        default=None,
        description="vllm: --kv-cache-dtype; auto (the model's dtype, default), fp8, "
        "fp8_e4m3 or fp8_e5m2",
    )
    enforce_eager: bool | None = Field(
        default=None, description="vllm: --enforce-eager, no CUDA graphs (default false)"
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="vllm: --max-num-seqs, the requests its scheduler runs at once (sizes "
        "the profile run's sampler and the CUDA graphs); default vLLM's for the release and "
        "GPU (256, or 1024 on a 70 GiB+ card that is not an A100). The KV cache holds "
        "'parallel' requests of 'ctx' tokens",
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict,
        max_length=64,
        description="vllm: environment variables for the server, VLLM_*, CUDA_*, NCCL_* "
        "or PYTORCH_*, e.g. {VLLM_MARLIN_USE_ATOMIC_ADD: '1'}; never secrets (use api_key)",
    )
    served_model_name: ServedName | None = Field(
        default=None, description="vllm: --served-model-name, the name clients ask for"
    )
    lora: Lora | None = Field(
        default=None,
        description="LoRA adapters: {adapters: [{name, path}], max_loras, max_lora_rank, "
        "max_cpu_loras}; vllm budgets their GPU slots, llama.cpp their tensors",
    )
    speculative: Speculative | None = Field(
        default=None,
        description="vllm: speculative decoding, {method: mtp, num_tokens: N} (the "
        "checkpoint's MTP layers) or {method: draft, num_tokens: N, model: MODEL_ID}",
    )
    draft: Draft | None = Field(
        default=None,
        description="llama.cpp: speculative decoding with a draft model, {model: MODEL_ID, "
        "gpus: [..], cache_type_k, cache_type_v, max_tokens}; planned beside the service's "
        "own buffers",
    )
    numa: Numa | None = Field(
        default=None,
        description="NUMA placement on a host of several nodes, {policy: interleave} or "
        "{policy: bind, nodes: [0]}: rendered into the unit (NUMAPolicy=, NUMAMask=, "
        "CPUAffinity=numa) and read by the speed model; not written: the kernel's default "
        "(pages on the node that first touches them)",
    )
    default: bool | None = Field(
        default=None,
        description="among services that conflict, the one started at boot (only it "
        "is WantedBy); the others start by hand: systemctl start NAME",
    )
    schedule: Annotated[Text, AfterValidator(_schedule)] | None = Field(
        default=None,
        description='daily windows the service runs in, e.g. "22:00-06:00" or '
        '"22:00-06:00, 12:00-13:00": timers start and stop it (it is not started at '
        "boot), and the plan counts it against host RAM bandwidth only then",
    )


class Spec(Strict):
    """A layoutgen spec: one host and what runs on it."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        title="layoutgen spec",
        json_schema_extra={"$id": "https://layoutgen.invalid/schema/spec.schema.json"},
    )

    version: Literal[1] = Field(default=1, description="spec format version")
    host: Host = Field(description="the machine: CPU, RAM and GPUs")
    models: dict[Ident, Model] = Field(
        default_factory=dict,
        max_length=256,
        description="model id -> GGUF path on the host and profile",
    )
    runtimes: dict[Ident, Runtime] = Field(
        default_factory=dict,
        max_length=256,
        description="runtime id -> llama.cpp/ik_llama.cpp image or binary",
    )
    services: dict[Name, Service] = Field(
        default_factory=dict, max_length=256, description="service name -> what to run and where"
    )


SHORTHAND_EXPERT_MODES = ("auto", "host", "gpu")


def json_schema() -> dict[str, Any]:
    """The JSON Schema editors use (``layoutgen schema``)."""
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    # pydantic describes the mapping forms of 'experts'; the shorthand strings
    # ('experts: host') are turned into mappings before validation, so add them.
    experts = schema["$defs"]["Service"]["properties"]["experts"]
    shorthand = {"type": "string", "enum": list(SHORTHAND_EXPERT_MODES)}
    experts["anyOf"] = [shorthand, *experts["anyOf"]]
    return schema
