"""What rendering the imported service writes that the command did not say, and what
import could not carry over.

Why list it: an imported service should start the server the user ran.  Render
pins every decision in the argv (DESIGN §7): a flag the command left to the
runtime's default is written out (``-np``, ``-ctk``, ``-b``, ``-fa``, ...), and
where that default differs by build the pinned value may not be what ran.
Settings of the container or unit the spec has no key for (``--restart``,
``Restart=``, ``--shm-size``, ...) are dropped.  Both are said, never silent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: why a dropped container or unit setting has no place in the spec
_WHY_DROPPED = {
    "--restart": "layoutgen renders Restart=on-failure with a start limit",
    "Restart": "layoutgen renders Restart=on-failure with a start limit",
    "RestartSec": "layoutgen renders its own restart policy",
    "ExecStartPre": "layoutgen renders its own start steps",
    "ExecStartPost": "layoutgen renders its own readiness wait",
    "ExecStop": "layoutgen renders its own stop",
    "TimeoutStartSec": "layoutgen sizes it from the model's load",
    "--ulimit": "layoutgen sets memlock itself for mlock and pinned services",
    "LimitMEMLOCK": "layoutgen sets memlock itself for mlock and pinned services",
    "--shm-size": "the spec has no key for it",
    "--ipc": "the spec has no key for it",
    "--network": "layoutgen publishes the service's port",
    "--net": "layoutgen publishes the service's port",
    "--security-opt": "the spec has no key for it",
    "--privileged": "layoutgen never renders a privileged container",
}


def dropped(written: str) -> str:
    """Why a container or unit setting, as written, is not in the spec."""
    key = written.split("=", 1)[0].split(" ", 1)[0]
    why = _WHY_DROPPED.get(key, "the spec has no key for it")
    return f"dropped {written}: {why}"


#: the oldest llama.cpp build whose -np default (auto: 4 slots) layoutgen read
#: (layoutgen.spec.flags.PARALLEL_AUTO, builds 9093-11434)
_AUTO_FROM = 9093


def default_slots(kind: str, version: str | None) -> tuple[int, str]:
    """The slots a server without ``-np`` starts, and why: ik_llama.cpp 1; llama.cpp
    ``-np auto`` (4 slots) from the builds read, 1 where the build is unknown or older
    (said, with what to write)."""
    from layoutgen.spec.flags import IK_PARALLEL_DEFAULT, PARALLEL_AUTO

    if kind == "ik_llama.cpp":
        return IK_PARALLEL_DEFAULT, "ik_llama.cpp's default, written out (no change)"
    auto = kind == "llama.cpp" and version is not None and version.isdigit()
    if auto and int(str(version)) >= _AUTO_FROM:
        return PARALLEL_AUTO, f"llama-server's '-np auto' (4 slots) in build {version}"
    return 1, (
        "one slot, llama-server's default before '-np auto' (4 slots); write parallel: 4 "
        "if your build started 4"
    )


def added(
    kind: str,
    version: str | None,
    last: Mapping[str, object],
    args: Sequence[str],
    ids: Sequence[str],
    has_ngl: bool,
) -> list[str]:
    """The flags render adds to the imported service's argv, each with why.

    ``last``: the command's flags by spec meaning (``parallel``, ``batch``, ...);
    ``args``: what passes through; ``ids``: the service's GPUs."""
    from layoutgen import runtimes

    try:
        rt = runtimes.get(kind, version)
    except (KeyError, ValueError):  # a build no rule names: the newest rules, as written
        rt = runtimes.get(kind)
    out = []
    defaults = (
        ("batch", "-b 2048", "llama.cpp's default batch"),
        ("ubatch", "-ub 512", "llama.cpp's default micro-batch"),
        ("cache_type_k", "-ctk f16", "the runtime's default K cache type"),
        ("cache_type_v", "-ctv f16", "the runtime's default V cache type"),
    )
    if "parallel" not in last:
        n, why = default_slots(kind, version)
        out.append(f"adds -np {n}: {why}")
    for key, flag, why in defaults:
        if key not in last:
            out.append(f"adds {flag}: {why}, written out (no change)")
    if ids and not has_ngl:
        out.append(
            "adds -ngl 999: the command gives no -ngl; builds before -ngl auto kept every "
            "layer on the CPU: write gpus: [] if yours ran on the CPU"
        )
    if len(ids) > 1 and "tensor_split" not in last:
        out.append(
            "adds -sm layer -ts SHARES: the plan's layer split over the GPUs, in place of "
            "the runtime's split by free memory"
        )
    elif len(ids) > 1 and "split_mode" not in last:
        out.append("adds -sm layer: the runtime's default split, written out (no change)")
    fit = rt.fit_off()
    if fit and "fit" not in last:
        out.append(f"adds {' '.join(fit)}: layoutgen pins placement; the runtime re-fits no more")
    if not any(a in ("-fa", "--flash-attn", "-no-fa", "--no-flash-attn") for a in args):
        on = bool(ids)
        flags = rt.flash_attn_flags(on)
        state = "on" if on else "off"
        if flags:  # none: this build's default is what the plan assumes
            out.append(
                f"adds {' '.join(flags)}: flash attention {state} pinned; the command left it "
                "to the build's default (off on ik_llama.cpp before 3928, auto on recent "
                "llama.cpp): "
                "put '-fa', 'off' (or 'on') in args if yours ran otherwise"
            )
    return out
