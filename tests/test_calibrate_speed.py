"""``layoutgen calibrate`` on a timing log fits host.efficiency (issue 18: "calibrate on a
llama-bench or llama-server timing log fits the host's constants").

Seed 001's own timing lines (configuration 1, GLM-5.1 under --cpu-moe: 18.84 tok/s
after a 30-token prompt) and llama-bench rows, on seed 001's final layout given its
CPU (EPYC 9175F) so the speed model runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_speed_policy import _familiar

from layoutgen.calibrate.speed import read_timings
from layoutgen.render.validate import validate_file
from layoutgen.solve import plan_speed
from layoutgen.solve.plan import SpeedPlan
from layoutgen.speed import model

from conftest import run_cli

SERVER = """\
slot launch_slot_: id  0 | task 0 | processing task
prompt eval time =    1323.95 ms /    30 tokens (   44.13 ms per token,    22.66 tokens per second)
       eval time =   53078.31 ms /  1000 tokens (   53.08 ms per token,    18.84 tokens per second)
      total time =   54402.26 ms /  1030 tokens
"""

BENCH = """\
| model               |       size |  backend | ngl |            test |           t/s |
| ------------------- | ---------: | -------- | --: | --------------: | ------------: |
| glm-dsa 744B IQ3_KS | 304.29 GiB |  CUDA    |  99 |           pp512 | 110.20 ± 0.31 |
| glm-dsa 744B IQ3_KS | 304.29 GiB |  CUDA    |  99 |           tg128 |  19.10 ± 0.02 |
| glm-dsa 744B IQ3_KS | 304.29 GiB |  CUDA    |  99 |   tg128 @ d4096 |  18.40 ± 0.05 |
"""


def test_timings_are_read_with_the_depth_they_decoded_at() -> None:
    (server,) = read_timings(SERVER)
    assert server.depth == 30 + 1000 // 2 and server.tps == pytest.approx(1000 / 53.07831)
    bench = read_timings(BENCH)
    assert [(t.depth, t.tps) for t in bench] == [(64, 19.10), (4096 + 64, 18.40)]  # no pp
    assert read_timings("llama_kv_cache_init: CUDA0 KV buffer size = 1.00 MiB\n") == []


def test_a_server_log_fits_the_efficiency_and_writes_it(tmp_path: Path) -> None:
    spec = _familiar(tmp_path, "head-tail")
    before = spec.read_text()
    log = tmp_path / "timing.log"
    log.write_text(SERVER)
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa"])
    assert result.code == 0, result.stderr
    assert "host.efficiency: " in result.stderr and "1 decode timing of grandpa" in result.stderr
    after = spec.read_text()
    added = [line for line in after.splitlines() if line not in before.splitlines()]
    assert len(added) == 1 and added[0].startswith("  efficiency: ")
    assert "# fitted by layoutgen calibrate from timing.log" in added[0]
    # one timing, one constant: the plan now predicts that run exactly
    v = validate_file(spec)
    sp = v.plan.service("grandpa")
    assert isinstance(sp.speed, SpeedPlan) and sp.speed.efficiency_basis == "given"
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    w = plan_speed.workload(
        sp, v.profiles["glm-5.1-iq3_ks"], v.spec.runtimes["ik_llama"].rules(), 32768
    )
    assert model.decode(m, w, 530).tps == pytest.approx(18.84, rel=0.005)  # eta to 3 digits
    # again with a bench log: the line is replaced, nothing else moves
    bench = tmp_path / "bench.log"
    bench.write_text(BENCH)
    assert run_cli(["calibrate", str(bench), str(spec), "--service", "grandpa"]).code == 0
    again = spec.read_text()
    assert again.count("efficiency:") == 1 and "calibrate from bench.log" in again
    assert [x for x in again.splitlines() if "efficiency" not in x] == [
        x for x in before.splitlines()
    ]


def test_without_the_host_bandwidth_the_fit_is_refused(tmp_path: Path) -> None:
    spec = _familiar(tmp_path, "head-tail")
    spec.write_text(spec.read_text().replace("    model: EPYC 9175F\n", ""))
    log = tmp_path / "timing.log"
    log.write_text(SERVER)
    result = run_cli(["calibrate", str(log), str(spec), "--service", "grandpa"])
    assert result.code == 1
    assert "services.grandpa: the speed model cannot run: no host bandwidth" in result.stderr
    assert "efficiency" not in spec.read_text()
