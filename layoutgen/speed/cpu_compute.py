"""How fast a CPU's threads multiply quantized weights in decode, per type and
instruction set, from published kernel throughputs.

A decoding token multiplies every weight it reads by one activation vector.  On a GPU
that is free next to the reading; on a CPU it is not: unpacking a trellis (IQ*_KT) or
grid (IQ1_S, IQ2_XXS, IQ3_S) block costs more cycles than its bytes take to arrive,
and at low thread counts any type is compute-bound.  The speed model
(:func:`layoutgen.speed.model.decode`) joins host RAM's reading time with this compute
time, ``(read^P + compute^P)^(1/P)`` (:data:`layoutgen.speed.model.ROOFLINE_P`), where

    compute = sum over the host's weights of weights / (threads x clock x w[type, ISA])

``threads`` are the decoding threads up to the physical cores (SMT siblings share a
core's vector units: they add no compute), ``clock`` the CPU's base clock
(hardware.CpuFacts.base_ghz; the figures below are derived with their source machine's
base clock, so the ratio carries, not the absolute frequency), and ``w`` the weights a
core multiplies a cycle, derived from a published token-generation figure at a thread
count low enough to be compute-bound (:class:`Figure`): the token's time there, less the
part its bytes explain (inverted through the same ``P``), divided over its weights.

Keys: the runtime ("ik_llama.cpp" or "llama.cpp": their CPU kernels differ by up to 2x
on the same type), the type (a K-quant mix such as Q4_K_S or Q4_K_M by its main type;
a repacked type, ``X_R4``/``X_R8``, or any type run with ``-rtr``, as ``X/rtr``), and
the ISA class (hardware.CpuFacts.isa).  A Zen 5 or Intel AVX-512 core without its own
figure takes Zen 4's (the same AVX-512 kernels; full-width datapaths run them at least
as fast, so this can only price it slower than it is).  A type, runtime or ISA without
a figure here is priced at its bytes alone, as before: NEON (the M2-Max figures of the
same sources) has no row yet, for want of an Apple CPU in the hardware table.

Choosing P on the thread sweeps of tests/speed_data (ik13-*, ik153-*, ik154-*, ik212-*,
ik541-*: TG at 1-16 threads on the Ryzen-7950X and the 5975WX), their 58 results at
thread counts no figure here comes from, leave-one-machine-out (mean |error|, worst,
share within 15 %): P = 2: 8.2 %, 21 %, 86 %; P = 2.5: 7.4 %, 21 %, 88 %; P = 3: 7.2 %,
26 %, 84 %; P = 4: 7.9 %, 31 %, 83 %; a plain max (P = 50): 11.5 %, 49 %, 78 % (it
reads the knee fast: PR 212's IQ1_S at 8 threads, PR 13's TQ2_0 at 2-4).  P = 2.5: the
reading and the unpacking overlap only in part near the knee.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from layoutgen.speed import hardware
from layoutgen.speed.model import ROOFLINE_P

GIB = 1024**3

#: a figure whose bytes explain more than this share of its token's time is too close
#: to memory-bound to say how fast the kernel computes: no row is derived from it
MEMORY_BOUND = 0.85

ISAS = ("avx2", "zen4", "zen5", "avx512", "neon")
#: an ISA class without its own figure for a type takes these, in order
FALLBACK: dict[str, tuple[str, ...]] = {
    "avx2": ("avx2",),
    "zen4": ("zen4",),
    "zen5": ("zen5", "zen4"),
    "avx512": ("avx512", "zen4"),
    "neon": ("neon",),
}

IK = "ik_llama.cpp"
MAINLINE = "llama.cpp"

D164 = "https://github.com/ikawrakow/ik_llama.cpp/discussions/164"
PR13 = "https://github.com/ikawrakow/ik_llama.cpp/pull/13"
PR212 = "https://github.com/ikawrakow/ik_llama.cpp/pull/212"
PR541 = "https://github.com/ikawrakow/ik_llama.cpp/pull/541"

#: ikawrakow's machines read at what he states (tests/speed_data: ram: {measured: ...})
BW_7950X = 60e9  # "60 GB/s is the best one gets in practice for TG" (PR 232)
BW_5975WX = 58.5e9  # his TG sweeps saturate there (PR 152, PR 13)

#: LLaMA-3.1-8B: 8.03e9 parameters less token_embd (128256 x 4096, one row a token)
LLAMA8B_WEIGHTS = 8.03e9 - 128256 * 4096
#: TriLM 3.9B (30 layers, n_embd 3072, FFN 9216, vocab 50688, output untied): 3.99e9
#: parameters less token_embd
TRILM_PARAMS = 30 * (4 * 3072**2 + 3 * 3072 * 9216) + 2 * 50688 * 3072
TRILM_WEIGHTS = TRILM_PARAMS - 50688 * 3072
#: DeepSeek-V2-Lite (tests/speed_data/ik212-*): the weights and bytes one token reads,
#: as layoutgen.speed.cases figures them from the record (6 of 64 experts in 26 layers,
#: the rest dense; IQ1_S experts at 1.5625 bpw, 3.33 GiB in all)
DSLITE_WEIGHTS = 2.50495e9
DSLITE_BYTES = 0.91027e9


def _llama8b_bytes(size_gib: float) -> float:
    """Bytes a LLaMA-3.1-8B token reads from a SIZE_GIB file (token_embd left out at
    the file's mean bits per weight, as cases.shape does)."""
    return size_gib * GIB * LLAMA8B_WEIGHTS / 8.03e9


def _trilm_bytes(size_gib: float) -> float:
    return size_gib * GIB * TRILM_WEIGHTS / TRILM_PARAMS


@dataclass(frozen=True)
class Figure:
    """One published TG figure a row is derived from."""

    runtime: str
    quant: str  # the key (:func:`key`)
    isa: str
    cpu: str  # hardware.CPUS key of the machine it ran on
    threads: int
    tps: float
    weights: float  # weights a token multiplies
    nbytes: float  # bytes a token reads
    bandwidth: float  # what that machine reads at (its owner's figure)
    source: str  # address and the row
    since: str = ""  # ISO dates: the kernels this figure measured were in force
    until: str = ""

    def share_read(self) -> float:
        """The share of the token's time its bytes explain."""
        return self.nbytes / self.bandwidth * self.tps

    def weights_per_cycle(self) -> float | None:
        """Weights one core multiplies a cycle (at the base clock), or None where the
        figure is too close to memory-bound to tell (:data:`MEMORY_BOUND`)."""
        share = self.share_read()
        if share > MEMORY_BOUND:
            return None
        t = 1.0 / self.tps
        computing = t * float((1.0 - share**ROOFLINE_P) ** (1.0 / ROOFLINE_P))
        clock = hardware.cpu(self.cpu).base_ghz * 1e9
        return self.weights / (computing * self.threads * clock)


def _d164(quant: str, size_gib: float, mainline: float, ik: float) -> tuple[Figure, Figure]:
    """Discussion 164's Zen 4 table (Ryzen-7950X, LLaMA-3.1-8B, TG-128 at 2 threads):
    llama.cpp build 4384 and ik_llama.cpp with ``-rtr 1`` (repacked)."""
    row = f"{D164} (Ryzen-7950X table, '8B {quant}' tg128 at 2 threads)"
    nb = _llama8b_bytes(size_gib)
    return (
        Figure(MAINLINE, quant, "zen4", "Ryzen 9 7950X", 2, mainline, LLAMA8B_WEIGHTS, nb,
               BW_7950X, row),
        Figure(IK, f"{quant}/rtr", "zen4", "Ryzen 9 7950X", 2, ik, LLAMA8B_WEIGHTS, nb,
               BW_7950X, row),
    )  # fmt: skip


FIGURES: tuple[Figure, ...] = (
    # discussion 164 (2024-12-24): every tg128 row of the Ryzen-7950X table
    *_d164("BF16", 14.96, 4.05, 4.27),
    *_d164("Q8_0", 7.95, 4.95, 7.63),
    *_d164("Q5_0", 5.22, 5.30, 11.14),
    *_d164("Q4_0", 4.35, 11.23, 12.92),
    *_d164("Q2_K", 2.78, 11.33, 17.10),  # the "Q2_K - Small" mix
    *_d164("Q3_K", 3.41, 8.80, 12.99),  # "Q3_K - Small"
    *_d164("Q4_K", 4.36, 9.57, 13.48),  # "Q4_K - Small"
    *_d164("Q5_K", 5.21, 7.51, 11.41),  # "Q5_K - Small"
    *_d164("Q6_K", 6.14, 7.62, 10.05),
    *_d164("IQ4_NL", 4.35, 5.96, 9.30),
    *_d164("IQ4_XS", 4.13, 8.15, 13.58),
    *_d164("IQ2_XXS", 2.23, 5.47, 8.74),
    *_d164("IQ2_XS", 2.42, 5.87, 6.87),
    *_d164("IQ2_M", 2.74, 5.24, 5.57),
    *_d164("IQ3_XXS", 3.04, 4.18, 6.23),
    *_d164("IQ3_S", 3.42, 3.71, 4.47),
    # PRs 153 and 154 (2024-12-20): LLaMA-3.1-8B, ik_llama.cpp's plain and 4-row
    # interleaved (_R4) kernels, tg128 at 2 threads.  Zen 4's _R4 rows stand behind
    # discussion 164's (the later figure of the same kernels, found first)
    *(
        Figure(IK, quant, isa, cpu, 2, tps, LLAMA8B_WEIGHTS, _llama8b_bytes(size), bw,
               f"https://github.com/ikawrakow/ik_llama.cpp/pull/{pr} ({row} 2-thread row, "
               f"{col} column)", since="2024-12-20")
        for pr, base, size, rows in (
            (153, "IQ3_XXS", 3.04, (("zen4", 5.18, 6.53), ("avx2", 2.04, 4.07))),
            (154, "IQ2_XXS", 2.23, (("zen4", 6.59, 8.66), ("avx2", 2.62, 5.54))),
        )
        for isa, plain, r4 in rows
        for cpu, bw, row in (
            ("Ryzen 9 7950X", BW_7950X, "Zen4")
            if isa == "zen4"
            else ("Threadripper PRO 5975WX", BW_5975WX, "AVX2"),
        )
        for quant, tps, col in ((base, plain, base), (f"{base}/rtr", r4, f"{base}_R4"))
    ),
    # PR 13 (2024-08-06): TriLM 3.9B, 1.08 GiB, tg128 at 1 thread; TQ2_0 is llama.cpp
    # PR 8151's type and kernels, IQ2_TN this PR's
    Figure(MAINLINE, "TQ2_0", "avx2", "Threadripper PRO 5975WX", 1, 15.75, TRILM_WEIGHTS,
           _trilm_bytes(1.08), BW_5975WX, f"{PR13} (AVX2 table, 1 tg128, t/s (PR-8151))"),
    Figure(IK, "IQ2_TN", "avx2", "Threadripper PRO 5975WX", 1, 15.71, TRILM_WEIGHTS,
           _trilm_bytes(1.08), BW_5975WX, f"{PR13} (AVX2 table, 1 tg128, t/s (this PR))"),
    Figure(MAINLINE, "TQ2_0", "zen4", "Ryzen 9 7950X", 1, 18.76, TRILM_WEIGHTS,
           _trilm_bytes(1.08), BW_7950X, f"{PR13} (Zen4 table, 1 tg128, t/s (PR-8151))"),
    Figure(IK, "IQ2_TN", "zen4", "Ryzen 9 7950X", 1, 20.11, TRILM_WEIGHTS,
           _trilm_bytes(1.08), BW_7950X, f"{PR13} (Zen4 table, 1 tg128, t/s (this PR))"),
    # PR 212 (2025-02-20): DeepSeek-Lite IQ1_S, tg128 at 2 threads.  "main" is
    # ik_llama.cpp before the PR, whose IQ1_S dot product was ggml's, as llama.cpp's
    Figure(IK, "IQ1_S", "avx2", "Threadripper PRO 5975WX", 2, 12.13, DSLITE_WEIGHTS,
           DSLITE_BYTES, BW_5975WX, f"{PR212} (AVX2, 2 tg128, t/s (main))",
           until="2025-02-20"),
    Figure(IK, "IQ1_S", "avx2", "Threadripper PRO 5975WX", 2, 15.74, DSLITE_WEIGHTS,
           DSLITE_BYTES, BW_5975WX, f"{PR212} (AVX2, 2 tg128, t/s (PR))", since="2025-02-20"),
    Figure(IK, "IQ1_S", "zen4", "Ryzen 9 7950X", 2, 14.15, DSLITE_WEIGHTS, DSLITE_BYTES,
           BW_7950X, f"{PR212} (Zen4, 2 tg128, t/s (main))", until="2025-02-20"),
    Figure(IK, "IQ1_S", "zen4", "Ryzen 9 7950X", 2, 19.08, DSLITE_WEIGHTS, DSLITE_BYTES,
           BW_7950X, f"{PR212} (Zen4, 2 tg128, t/s (PR))", since="2025-02-20"),
    Figure(MAINLINE, "IQ1_S", "avx2", "Threadripper PRO 5975WX", 2, 12.13, DSLITE_WEIGHTS,
           DSLITE_BYTES, BW_5975WX, f"{PR212} (AVX2, 2 tg128, t/s (main): ggml's kernel)"),
    Figure(MAINLINE, "IQ1_S", "zen4", "Ryzen 9 7950X", 2, 14.15, DSLITE_WEIGHTS, DSLITE_BYTES,
           BW_7950X, f"{PR212} (Zen4, 2 tg128, t/s (main): ggml's kernel)"),
    # PR 541 (2025-06-19): LLaMA-3.1-8B trellis types on the Ryzen-7950X, tg128 at 2
    # threads; main before the PR, the PR's kernels from then on
    *(
        Figure(IK, quant, "zen4", "Ryzen 9 7950X", 2, tps, LLAMA8B_WEIGHTS,
               _llama8b_bytes(size), BW_7950X, f"{PR541} ({quant} table, 2 tg128, {col})",
               since=since, until=until)
        for quant, size, main, pr in (
            ("IQ2_KT", 2.77, 3.28, 4.11),
            ("IQ3_KT", 3.58, 2.87, 3.92),
            ("IQ4_KT", 4.30, 2.26, 3.27),
        )
        for tps, col, since, until in (
            (main, "t/s (main)", "", "2025-06-19"),
            (pr, "t/s (PR)", "2025-06-19", ""),
        )
    ),
)  # fmt: skip

_MIX = re.compile(r"^(Q[2-6]_K)_(S|M|L|XL)$")
_REPACKED = re.compile(r"^(.+)_R(4|8|16)$")


def key(quant: str, rtr: bool = False) -> str:
    """The row key of type QUANT (a GGUF tensor type or a llama-quantize mix name), run
    with ``-rtr`` when RTR: "Q4_K_M" -> "Q4_K"; "IQ4_KS_R4" -> "IQ4_KS/rtr"."""
    q = quant.strip().upper()
    if q.endswith("/RTR"):  # a key already
        q, rtr = q.removesuffix("/RTR"), True
    m = _REPACKED.match(q)
    if m:
        q, rtr = m.group(1), True
    m = _MIX.match(q)
    if m:
        q = m.group(1)
    return f"{q}/rtr" if rtr else q


_KEYS = frozenset(f.quant.removesuffix("/rtr") for f in FIGURES)


def priced(quant: str) -> str:
    """QUANT's key (without ``-rtr``) where some figure has it, else "": the type a
    chunk carries (layoutgen.solve.plan_speed groups the rest together)."""
    k = key(quant)
    return k if k.removesuffix("/rtr") in _KEYS else ""


def runtime_family(runtime: str) -> str | None:
    """ "ik_llama.cpp" or "llama.cpp" for a runtime named RUNTIME (a record's
    ``runtime:`` line or a spec's runtime kind), None for anything else (vLLM)."""
    r = runtime.lower()
    if "ik_llama" in r or "ik-llama" in r:
        return IK
    if "llama.cpp" in r or "llama-cpp" in r or r.startswith("llama"):
        return MAINLINE
    return None


def figure(runtime: str, quant: str, isa: str, date: str | None = None) -> Figure | None:
    """The figure that prices QUANT (a :func:`key`) under RUNTIME (a family) on ISA,
    for a build of DATE (ISO; None: the newest kernels), or None."""
    for cls in FALLBACK.get(isa, (isa,)):
        for f in FIGURES:
            if f.runtime != runtime or f.quant != quant or f.isa != cls:
                continue
            if date is None:
                if f.until:
                    continue
            elif (f.since and date < f.since) or (f.until and date >= f.until):
                continue
            if f.weights_per_cycle() is not None:
                return f
    return None


def rate(
    cpu: hardware.CpuFacts, threads: int, runtime: str, quant: str, date: str | None = None
) -> float | None:
    """Weights a second THREADS threads of CPU multiply of QUANT (a :func:`key`) under
    RUNTIME (a family), or None where no figure prices it."""
    f = figure(runtime, quant, cpu.isa, date)
    wpc = f.weights_per_cycle() if f is not None else None
    if wpc is None:
        return None
    cores = max(1, min(threads, cpu.cores))
    return cores * cpu.base_ghz * 1e9 * wpc


def rates(
    cpu: hardware.CpuFacts,
    threads: int,
    runtime: str,
    quants: set[str] | frozenset[str] | tuple[str, ...],
    date: str | None = None,
) -> tuple[tuple[str, float], ...]:
    """``Memory.compute`` for the keys QUANTS: (key, weights/s) for those with a figure."""
    family = runtime_family(runtime)
    if family is None:
        return ()
    out = []
    for q in sorted(set(quants)):
        r = rate(cpu, threads, family, q, date)
        if r is not None:
            out.append((q, r))
    return tuple(out)


def table() -> list[tuple[str, str, str, float | None, str]]:
    """(runtime, key, ISA, weights a core-cycle or None, source) for every figure."""
    return [(f.runtime, f.quant, f.isa, f.weights_per_cycle(), f.source) for f in FIGURES]


if __name__ == "__main__":  # pragma: no cover - a listing
    for runtime, q, isa, wpc, src in table():
        shown = f"{wpc:6.2f}" if wpc is not None else "  (memory-bound)"
        print(f"{runtime:13} {q:12} {isa:5} {shown}  {src}")
