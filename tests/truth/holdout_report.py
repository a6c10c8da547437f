"""The truth table's figures on the held-out logs (tests/truth/holdout).

The records in tests/truth/records were read while the rules were written;
the ones in tests/truth/holdout were not (other threads, other builds), so
their figures are the ones that predict what users will see.  Each record is
planned twice: with its build as ``version:`` and without it (planned for
every build, :mod:`layoutgen.solve.builds`).

``python -m tests.truth.table --holdout`` prints this report.
"""

from __future__ import annotations

from tests.truth import table

HOLDOUT = table.ROOT / "tests" / "truth" / "holdout"


def under(outcomes: list[table.Outcome], field: str, limit: float) -> list[tuple[str, str, float]]:
    """(record, buffer, error) of every FIELD row planned more than LIMIT under its log
    (a buffer the plan lacks counts as -100 %)."""
    out = []
    for o, r in table.rows_of(outcomes):
        if r.field == field and r.logged:
            error = -1.0 if r.error is None else r.error
            if error < -limit:
                out.append((o.id, r.buffer, error))
    return out


def figures(outcomes: list[table.Outcome], label: str) -> list[str]:
    s = table.summarize(outcomes)
    left_out = [o for o in outcomes if o.reason is not None]
    lines = [
        f"{label}: {s.records} held-out logs, {s.expressible} expressible as a spec",
        f"- weights within ±0.5 %: {s.weights[0]} of {s.weights[1]} buffers",
        f"- KV within ±1 %: {s.kv[0]} of {s.kv[1]} buffers",
        f"- compute within ±15 %: {s.compute[0]} of {s.compute[2]} buffers; below -15 %: "
        f"{s.compute[1]}; worst {table._pct(s.worst_compute)}",
        f"- per-GPU totals (logged weights + planned KV and compute) within ±3 %: "
        f"{s.totals[0]} of {s.totals[1]}; under their log by more than 1 %: "
        f"{len(under(outcomes, 'total', 0.01))}",
    ]
    short = under(outcomes, "total", 0.01)
    lines.append(
        f"- logs with a GPU planned more than 1 % short: {len({rid for rid, _, _ in short})} "
        f"of {s.expressible}"
    )
    for what, found in (
        ("compute < -15 %", under(outcomes, "compute", 0.15)),
        ("GPU total < -1 %", short),
    ):
        by_record: dict[str, list[str]] = {}
        for rid, buf, e in found:
            by_record.setdefault(rid, []).append(f"{buf} {table._pct(e)}")
        for rid, bufs in by_record.items():
            lines.append(f"  - {what}: {rid}: {', '.join(bufs)}")
    for o in left_out:
        lines.append(f"  - left out: {o.id}: {o.reason}")
    return lines


def per_record(outcomes: list[table.Outcome]) -> list[str]:
    lines = ["| record | build | GPUs | KV | compute | GPU totals |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        if o.reason is not None:
            lines.append(f"| {o.id} | {o.build or '-'} | {o.gpus} | | | {o.reason[:80]} |")
            continue
        cols = [
            ", ".join(f"{r.buffer} {table._pct(r.error)}" for r in o.rows if r.field == f)
            for f in ("kv", "compute", "total")
        ]
        lines.append(f"| {o.id} | {o.build or '-'} | {o.gpus} | " + " | ".join(cols) + " |")
    return lines


def report() -> str:
    with_builds = table.evaluate_all(folder=HOLDOUT)
    without = table.evaluate_all(versions=False, folder=HOLDOUT)
    lines = [
        *figures(with_builds, "With each log's build (version:)"),
        "",
        *figures(without, "Without builds (planned for every build)"),
        "",
        "With each log's build:",
        "",
        *per_record(with_builds),
        "",
        "Without builds:",
        "",
        *per_record(without),
    ]
    return "\n".join(lines) + "\n"
