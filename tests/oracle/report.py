"""Print the oracle suite's accuracy table: predicted vs logged, per case and buffer.

    make oracle-report        (needs `make runtime`; --docs: into docs/explanation/accuracy.md)

The same runs as tests/test_oracle.py, as a Markdown table for docs/explanation/accuracy.md:
case, buffer, part, what the plan predicted, what llama.cpp logged, the
error and the plan's basis (exact / estimated).  ``CPU_Mapped`` rows with
mmap are the span of the file llama.cpp maps, not a size the plan predicts.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.oracle import cases, harness, models

#: where the table is shown; --docs rewrites it between these markers
DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "accuracy.md"
BEGIN, END = "<!-- oracle-report:begin -->", "<!-- oracle-report:end -->"


def main() -> int:
    rows: list[cases.Row] = []
    with tempfile.TemporaryDirectory(prefix="layoutgen-oracle-") as tmp_name:
        tmp = Path(tmp_name)
        built: dict[str, Path] = {}
        for case in cases.CASES:
            if case.arch not in built:
                gguf = models.BUILDERS[case.arch](tmp / f"{case.arch}.gguf")
                layoutgen = str(Path(sys.executable).parent / "layoutgen")
                profile = tmp / f"{case.arch}.profile.yaml"
                subprocess.run([layoutgen, "inspect", str(gguf), "-o", str(profile)], check=True)
                built[case.arch] = gguf
            gguf = built[case.arch]
            with harness.rpc_servers(case.devices) as endpoints:
                spec = tmp / f"{case.name}.yaml"
                spec.write_text(
                    cases.spec_text(
                        case,
                        gguf,
                        Path(f"{case.arch}.profile.yaml"),
                        endpoints,
                        harness.binary("llama-completion"),
                    )
                )
                service = cases.plan(spec)["services"]["oracle"]
                run = harness.run(harness.completion_argv(service["argv"]))
                # endpoints differ per run: name rpc buffers by device order instead
                order = {f"RPC0[{ep}]": f"RPC0[dev{i}]" for i, ep in enumerate(endpoints)}
                renamed = [
                    cases.Row(
                        row.case,
                        order.get(row.buffer, row.buffer),
                        row.part,
                        row.predicted,
                        row.logged,
                        row.basis,
                    )
                    for row in cases.compare(case, service, run)
                ]
                parts = ("weights", "kv", "compute")
                rows += sorted(renamed, key=lambda r: (r.buffer, parts.index(r.part)))
    table = [
        "| case | buffer | part | predicted MiB | logged MiB | error | basis |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        error = f"{r.error * 100:+.2f} %" if r.logged else "n/a"
        table.append(
            f"| {r.case} | {r.buffer} | {r.part} | {r.predicted / 2**20:.2f} | "
            f"{r.logged / 2**20:.2f} | {error} | {r.basis} |"
        )
    print("\n".join(table))
    if "--docs" in sys.argv[1:]:  # make oracle-report: the table on the accuracy page
        page = DOCS_PAGE.read_text()
        head, _, rest = page.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOCS_PAGE.write_text(f"{head}{BEGIN}\n\n" + "\n".join(table) + f"\n\n{END}{tail}")
    for part in ("weights", "kv", "compute"):
        errs = [
            abs(r.error) for r in rows if r.part == part and r.logged and r.buffer != "CPU_Mapped"
        ]
        if errs:
            print(
                f"\n{part}: {len(errs)} buffers, max |error| {max(errs) * 100:.2f} %, "
                f"within tolerance {sum(e <= cases.TOLERANCE[part] for e in errs)}/{len(errs)}",
                end="",
            )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
