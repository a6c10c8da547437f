"""``layoutgen calibrate`` on a timing log: the host's efficiency, fitted, into the spec.

The speed model (DESIGN, ``layoutgen.speed``) has one constant per machine:
``host.efficiency``, the share of peak memory bandwidth a decode reaches.  A
timing log of the service (llama-server's or llama-cli's ``eval time = … ms /
N tokens``, after its ``prompt eval time = … ms / P tokens``; llama-bench's
``tg128`` rows, ``tg128 @ d4096`` at a depth) gives measured decode speeds;
the plan gives where every byte lives.  The fit (``model.fit``, least squared
log error) is written as ``host.efficiency`` with a comment naming the log.

Depth: a server's request decodes after its prompt, so its mean depth is the
prompt plus half the generated tokens; a bench row's is its ``@ dN`` plus half
of its ``tgN``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from layoutgen.errors import Diagnostic, InvalidInput, LayoutgenError, Severity
from layoutgen.inputs import source

#: llama-server / llama-cli timings (common/log and tools/server print_timings)
_SPEC_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
#: a number as the runtimes print it: ASCII digits, bounded (no "...", "1.2.3", nor a
#: 400-digit figure that float() turns into inf)
_NUM = r"[0-9]{1,12}(?:\.[0-9]{1,9})?"
_PROMPT = re.compile(
    rf"prompt eval time\s*=\s*{_NUM} ms\s*/\s*(?P<n>[0-9]{{1,9}}) tokens", re.ASCII
)
_EVAL = re.compile(
    rf"(?<!prompt )eval time\s*=\s*(?P<ms>{_NUM}) ms\s*/\s*(?P<n>[0-9]{{1,9}}) (?:tokens|runs)",
    re.ASCII,
)
#: llama-bench's markdown rows: "| … | tg128 | 21.75 ± 0.10 |", "tg128 @ d4096"
_BENCH = re.compile(
    r"\|\s*tg(?P<n>[0-9]{1,9})(?:\s*@\s*d(?P<d>[0-9]{1,9}))?\s*\|\s*"
    rf"(?P<tps>{_NUM})(?:\s*±\s*{_NUM})?\s*\|\s*$",
    re.ASCII,
)


@dataclass(frozen=True)
class Timing:
    """One measured decode: where in the log, at what depth, how fast."""

    line: int
    depth: int
    tps: float


def read_timings(text: str) -> list[Timing]:
    """Every decode timing in a log, in order (none: an empty list)."""
    out: list[Timing] = []
    prompt = 0
    # lines end at "\n" alone, as start-up logs are read (str.splitlines would also end
    # one at "\r", "\x0b", "\x1c", U+0085, U+2028 ... and shift every line number after)
    for number, line in enumerate(text.split("\n"), start=1):
        if m := _PROMPT.search(line):
            prompt = int(m["n"])
            continue
        if (m := _EVAL.search(line)) and int(m["n"]) > 0 and float(m["ms"]) > 0:
            n = int(m["n"])
            out.append(Timing(number, prompt + n // 2, n / (float(m["ms"]) / 1000)))
            prompt = 0
            continue
        if (m := _BENCH.search(line)) and float(m["tps"]) > 0:
            depth = int(m["d"] or 0) + int(m["n"]) // 2
            out.append(Timing(number, depth, float(m["tps"])))
    return out


@dataclass(frozen=True)
class Fitted:
    service: str
    efficiency: float
    rows: tuple[tuple[str, float, float], ...]  # (where, predicted, measured tok/s)
    key: str = "efficiency"  # the host key written: efficiency or gpu_efficiency


def fit_efficiency(log: Path, spec: Path, service: str | None) -> Fitted:
    """Fit ``host.efficiency`` to the log's decode timings of ``service`` and write it
    into ``spec`` (atomically); raises InvalidInput / LayoutgenError, located."""
    from layoutgen.calibrate.command import _read_spec
    from layoutgen.calibrate.measured import choose_service, write_spec
    from layoutgen.render.validate import validate_document
    from layoutgen.solve import plan_speed
    from layoutgen.speed import model

    text = _read_log(log)
    timings = read_timings(text)
    if not timings:
        raise _error(
            str(log),
            "no decode timings (llama-server's 'eval time = … ms / N tokens', llama-bench's "
            "'tgN' rows); give the log of a run that generated tokens",
        )
    spec_text = _read_spec(spec, str(spec))
    doc = source.parse(spec_text, str(spec), spec)
    chosen = choose_service(doc, service)
    v = validate_document(doc)
    rs = next(r for r in v.services if r.name == chosen)
    sp = v.plan.service(chosen)
    machine = plan_speed.machine(v.spec, rs)
    if isinstance(machine, str):
        raise _error(str(spec), f"services.{chosen}: the speed model cannot run: {machine}")
    if sp.budget is not None:
        raise _error(str(spec), f"services.{chosen}: vLLM services are not modelled for speed")
    profile = v.profiles[rs.service.model]
    rt = v.spec.runtimes[rs.service.runtime].rules()
    ctx = rs.service.ctx or (profile.hparams.n_ctx_train or 0)
    workload = plan_speed.workload(sp, profile, rt, ctx)
    on_host = plan_speed.reads_host(workload)
    if on_host and plan_speed.host_bandwidth(v.spec) is None:
        raise _error(
            str(spec),
            f"services.{chosen}: the speed model cannot run: no host bandwidth, and a token "
            "reads host RAM (write host.cpu.model, host.memory_bandwidth or "
            "host.memory_bandwidth_measured)",
        )
    runs = [
        model.Measurement(f"{log.name}:{t.line}", machine, workload, t.depth, t.tps)
        for t in timings
    ]
    # a token that reads host RAM fits host RAM's efficiency (the GPUs at theirs);
    # one that reads only GPU memory fits the GPUs'
    key = "efficiency" if on_host else "gpu_efficiency"
    found = model.fit(runs, target="host" if on_host else "gpu")
    eta = round(found.efficiency, 3)
    new_text = _with_efficiency(spec_text, doc, eta, log.name, key)
    try:
        write_spec(Path(os.path.realpath(spec)), new_text)
    except OSError as exc:
        raise LayoutgenError(f"cannot write {spec}: {exc.strerror}") from None
    return Fitted(chosen, eta, found.rows, key)


def _with_efficiency(
    text: str, doc: source.Document, eta: float, log: str, key: str = "efficiency"
) -> str:
    """``text`` with ``host.KEY: eta`` (replacing the one written, else inserted
    before host's first key, at its indent); other lines are kept byte for byte."""
    lines = _SPEC_LINE.findall(text)  # the lines doc.locate counts: CRLF, CR or LF ends one
    host = doc.plain().get("host") if isinstance(doc.plain(), dict) else None
    if not isinstance(host, dict) or not host:
        raise _error(doc.name, "the spec has no host mapping to write efficiency into")
    comment = f"  # fitted by layoutgen calibrate from {log}"
    if key in host:
        line, col = doc.locate(("host", key), at_key=True)
        indent = lines[line - 1][: col - 1]
    else:
        first = next(iter(host))
        line, col = doc.locate(("host", first), at_key=True)
        indent = lines[line - 1][: col - 1]
        if indent.strip():  # a flow mapping: host: {…}
            raise _error(doc.name, f"host is a flow mapping; write host.{key} by hand")
        lines.insert(line - 1, "")
    end = "\n" if not lines[line - 1] or lines[line - 1].endswith("\n") else ""
    lines[line - 1] = f"{indent}{key}: {eta:g}{comment}{end or chr(10)}"
    return "".join(lines)


def _read_log(path: Path) -> str:
    """The log's text (at most ``LOG_MAX`` bytes; bytes that are not UTF-8 replaced)."""
    from layoutgen.calibrate.startlog import LOG_MAX
    from layoutgen.models.inputs import read_bounded

    why, advice = "a timing log is a few MiB at most", "save the log to a file first"
    return read_bounded(path, str(path), LOG_MAX, why, advice).decode("utf-8", errors="replace")


def _error(where: str, message: str) -> InvalidInput:
    return InvalidInput([Diagnostic(where, 0, 0, Severity.ERROR, message)])
