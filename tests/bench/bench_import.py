"""``layoutgen import`` of a command with N ``-ot`` rules (issue 31: 20,000 took 6 s).

Printed, never asserted: seconds per run (best of 3, in this process) and
microseconds per rule, which stay flat as N grows when import is linear.
Run alone: ``python tests/bench/bench_import.py``.
"""

from __future__ import annotations

import time

from layoutgen.importer import import_text


def _command(n: int) -> str:
    rules = " ".join(f"-ot blk.{i % 78}.ffn_up_exps=CUDA{i % 2}" for i in range(n))
    return f"llama-server -m /m/a.gguf -c 8 -ngl 99 {rules}\n"


def main() -> None:
    print("import of N -ot rules (best of 3):")
    for n in (5_000, 10_000, 20_000, 40_000):
        text = _command(n)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            import_text(text)
            best = min(best, time.perf_counter() - start)
        print(f"  {n:>6} rules: {best:6.3f} s  ({best / n * 1e6:5.1f} us per rule)")


if __name__ == "__main__":
    main()
