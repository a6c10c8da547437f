"""The tensor types ik_llama.cpp's CUDA backend can multiply, by build.

A weight whose type the CUDA backend cannot multiply still loads onto a GPU
when ``-ngl``/``-ot`` put it there; the scheduler then finds no backend for
its matmul, copies the weight into the host's compute buffer and runs it on
the CPU, every batch.  That is the 932 MiB ``CUDA_Host`` compute buffer of
ik_llama.cpp PR #492's log (DeepSeek-R1 with ``iq1_m_r4`` down experts on
two A6000s, a build without an ``iq1_m_r4`` kernel): a layout no memory model
can plan and nobody wants.  layoutgen refuses it instead.

Read from every revision of ``ggml/src/ggml-cuda.cu`` in ik_llama.cpp's tree
(mirror of 2026-08-15, build 4840): the type list of
``ggml_backend_cuda_supports_op`` for ``GGML_OP_MUL_MAT``/``MUL_MAT_ID``.
Each entry: the first build (commit count) that lists the type, its date and
commit; 0 for the types of the oldest revision with the list (build 3347,
2024-07-27, commit 0ceeb1172).  Types not listed (the CPU-repacked ``_r4``/
``_r8`` types other than those below, ``q8_kv``, ...) have no CUDA matmul in
any build.
"""

from __future__ import annotations

from collections.abc import Mapping

from layoutgen.core.rules import Rule, Version, rule

#: type -> (first build, date, commit) whose CUDA backend multiplies it
_SINCE: Mapping[str, tuple[int, str, str]] = {
    "f16": (0, "2024-07-27", "0ceeb1172"),
    "f32": (0, "2024-07-27", "0ceeb1172"),
    "iq1_bn": (0, "2024-07-27", "0ceeb1172"),
    "iq1_m": (0, "2024-07-27", "0ceeb1172"),
    "iq1_s": (0, "2024-07-27", "0ceeb1172"),
    "iq2_bn": (0, "2024-07-27", "0ceeb1172"),
    "iq2_s": (0, "2024-07-27", "0ceeb1172"),
    "iq2_xs": (0, "2024-07-27", "0ceeb1172"),
    "iq2_xxs": (0, "2024-07-27", "0ceeb1172"),
    "iq3_s": (0, "2024-07-27", "0ceeb1172"),
    "iq3_xxs": (0, "2024-07-27", "0ceeb1172"),
    "iq4_nl": (0, "2024-07-27", "0ceeb1172"),
    "iq4_xs": (0, "2024-07-27", "0ceeb1172"),
    "q2_k": (0, "2024-07-27", "0ceeb1172"),
    "q3_k": (0, "2024-07-27", "0ceeb1172"),
    "q4_0": (0, "2024-07-27", "0ceeb1172"),
    "q4_1": (0, "2024-07-27", "0ceeb1172"),
    "q4_k": (0, "2024-07-27", "0ceeb1172"),
    "q5_0": (0, "2024-07-27", "0ceeb1172"),
    "q5_1": (0, "2024-07-27", "0ceeb1172"),
    "q5_k": (0, "2024-07-27", "0ceeb1172"),
    "q6_k": (0, "2024-07-27", "0ceeb1172"),
    "q8_0": (0, "2024-07-27", "0ceeb1172"),
    "q8_k": (0, "2024-07-27", "0ceeb1172"),
    "iq4_k": (3349, "2024-07-28", "007d2a56b"),
    "iq2_k": (3350, "2024-07-28", "3f7dad300"),
    "iq5_k": (3356, "2024-07-29", "e5cd93b4b"),
    "iq3_k": (3367, "2024-07-30", "fb4cff345"),
    "iq6_k": (3386, "2024-08-07", "4fda82725"),
    "bf16": (3428, "2024-09-14", "ba291cbae"),
    "q6_0": (3448, "2024-10-02", "104e7e26c"),
    "iq4_ks": (3455, "2024-10-09", "a10ccd65f"),
    "iq2_ks": (3458, "2024-10-13", "67817fb5b"),
    "iq4_kss": (3463, "2024-10-16", "f369c6f92"),
    "iq5_ks": (3696, "2025-05-15", "90e53a0b8"),
    "iq2_kt": (3707, "2025-05-22", "25d34e3d2"),
    "iq3_kt": (3707, "2025-05-22", "25d34e3d2"),
    "iq4_kt": (3707, "2025-05-22", "25d34e3d2"),
    "iq2_k_r4": (3714, "2025-05-26", "89728ab03"),
    "iq3_k_r4": (3714, "2025-05-26", "89728ab03"),
    "iq4_k_r4": (3714, "2025-05-26", "89728ab03"),
    "iq5_k_r4": (3714, "2025-05-26", "89728ab03"),
    "iq4_ks_r4": (3715, "2025-05-27", "6989ca024"),
    "iq5_ks_r4": (3715, "2025-05-27", "6989ca024"),
    "iq1_s_r4": (3726, "2025-06-05", "631ceee07"),
    "iq1_m_r4": (3729, "2025-06-05", "1b9b7bd5a"),
    "iq3_ks": (3778, "2025-07-02", "adc28f885"),
    "iq2_kl": (3800, "2025-07-14", "f375799f1"),
    "iq1_kt": (3810, "2025-07-20", "e1164e1fd"),
    "mxfp4": (3834, "2025-08-09", "e23b2a7cc"),
}

#: the same, as dated rules (so a version given as a date selects them too)
CUDA_MATMUL: Mapping[str, Rule] = {
    name: rule(
        f"cuda-matmul-{name}",
        build,
        date,
        f"ik_llama.cpp ggml-cuda.cu at {commit} (ggml_backend_cuda_supports_op)",
        f"the CUDA backend multiplies {name} weights",
    )
    for name, (build, date, commit) in _SINCE.items()
}


def gpu_matmul(qtype: str, version: Version | None) -> bool | Rule | None:
    """True if a build of ``version`` multiplies ``qtype`` on a GPU; else the rule that
    adds it (a later build), or None when no build does."""
    found = CUDA_MATMUL.get(qtype.lower())
    if found is None:
        return None
    return True if found.applies(version) else found
