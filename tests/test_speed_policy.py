"""The solver places experts for speed (issue 18): ``policy: speed`` orders expert
layers by the model's heat (``models.<id>.heat``, else the architecture's prior),
the plan shows prefill beside decode, and what each worker setting sharing a GPU
with the orchestrator trades against its speed.

Seed 001's final layout (layouts/familiar-final.yaml, GLM-5.1 beside two coder
workers on two 96 GB cards), given its CPU (EPYC 9175F, from the seed) so that the
speed model runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.render.validate import Validated, validate_file
from layoutgen.solve import plan_speed
from layoutgen.solve.plan import SpeedPlan, to_json, to_text
from layoutgen.speed import heat, model

LAYOUTS = Path(__file__).resolve().parents[1] / "layouts"


def _familiar(tmp: Path, policy: str, heat_file: str | None = None) -> Path:
    text = (LAYOUTS / "familiar-final.yaml").read_text()
    text = text.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    # the layout carries seed 001's CPU; written plainly, so a test can take it out
    text = re.sub(r"    model: EPYC 9175F .*\n", "    model: EPYC 9175F\n", text, count=1)
    assert "    model: EPYC 9175F\n" in text
    text = re.sub(r"      policy: head-tail .*\n", f"      policy: {policy}\n", text)
    if heat_file is not None:
        text = text.replace(
            "    profile: " + f"{LAYOUTS}/models/glm-5.1-iq3_ks.yaml\n",
            f"    profile: {LAYOUTS}/models/glm-5.1-iq3_ks.yaml\n    heat: {heat_file}\n",
        )
        assert f"heat: {heat_file}" in text
    path = tmp / f"familiar-{policy}.yaml"
    path.write_text(text)
    return path


def _speed(v: Validated, name: str = "grandpa") -> SpeedPlan:
    s = v.plan.service(name).speed
    assert isinstance(s, SpeedPlan)
    return s


def _gpu_layers(v: Validated) -> set[int]:
    sp = v.plan.service("grandpa")
    return {x for d, layers in sp.expert_layers.items() if d != "host" for x in layers}


def test_speed_policy_predicts_at_least_the_hand_plans_order(tmp_path: Path) -> None:
    """The seed's hand rule ("8 head, 8 tail, 4 middle": head-tail) against policy
    speed in the same VRAM: GLM's prior (head hotter than tail, fitted on seed 001)
    puts the head layers first, and the model predicts it faster."""
    hand = validate_file(_familiar(tmp_path, "head-tail"))
    fast = validate_file(_familiar(tmp_path, "speed"))
    assert len(_gpu_layers(hand)) == len(_gpu_layers(fast)) == 14  # the 7 + 7 that fit
    assert _gpu_layers(fast) == set(range(3, 17))  # the 14 hottest: the head
    assert _speed(fast).decode_tps > _speed(hand).decode_tps
    # the order came from the prior the speed model reads, not from the policy's name
    v = fast
    sp, rt = v.plan.service("grandpa"), v.spec.runtimes["ik_llama"].rules()
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    w = plan_speed.workload(sp, v.profiles["glm-5.1-iq3_ks"], rt, 32768)
    assert w.heat.source.startswith("seed 001")


def test_a_heat_file_decides_which_layers_go_to_the_gpus(tmp_path: Path) -> None:
    hot = {layer: (10 if layer >= 64 else 1) for layer in range(3, 78)}
    f = tmp_path / "heat.yaml"
    f.write_text(
        "schema: 1\nsource: a hand count\nlayers:\n"
        + "".join(f"  {k}: {v}\n" for k, v in hot.items())
    )
    v = validate_file(_familiar(tmp_path, "speed", str(f)))
    assert _gpu_layers(v) == set(range(64, 78))  # the 14 layers the file calls hottest
    assert _speed(v).decode_tps > 0
    # head-tail ignores heat: the file changes nothing there
    plain = validate_file(_familiar(tmp_path, "head-tail"))
    same = validate_file(_familiar(tmp_path, "head-tail", str(f)))
    assert _gpu_layers(plain) == _gpu_layers(same)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "models.glm-5.1-iq3_ks.heat: no file"),
        ("schema: 1\nlayers:\n  3: .nan\n", "counts must be finite and > 0"),
        ("schema: 1\nlayers: [3, 4]\n", "'layers' must map MoE layer numbers to counts"),
        ("{{{", "models.glm-5.1-iq3_ks.heat: cannot read"),
    ],
    ids=["missing", "nan", "list", "not-yaml"],
)
def test_a_bad_heat_file_is_a_located_error(
    tmp_path: Path, content: str | None, message: str
) -> None:
    f = tmp_path / "heat.yaml"
    if content is not None:
        f.write_text(content)
    with pytest.raises(InvalidInput) as err:
        validate_file(_familiar(tmp_path, "speed", str(f)))
    text = str(err.value)
    assert message in text
    assert re.search(r"familiar-speed\.yaml:\d+:\d+: error: models\.glm-5\.1-iq3_ks\.heat", text)


def test_a_gguf_that_is_no_imatrix_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "heat.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(InvalidInput) as err:
        validate_file(_familiar(tmp_path, "speed", str(f)))
    assert "models.glm-5.1-iq3_ks.heat:" in str(err.value)


def test_worker_settings_trade_against_the_orchestrators_speed(tmp_path: Path) -> None:
    """Each worker on a GPU with room for grandpa's experts: its KV one type smaller
    (f16 -> q8_0: 34 bytes per 32 values instead of 64), its context halved, its
    weights one quant step down (q4_0 4.5 -> q3_k 3.4375 bits a weight); each freed
    amount buys grandpa the hottest host expert tensors that fit."""
    v = validate_file(_familiar(tmp_path, "speed"))
    s = _speed(v)
    trades = {(t.service, t.gpu, t.setting): t for t in s.trades}
    assert set(trades) == {
        (w, g, k)
        for w, g in (("naughty-worker0", "gpu0"), ("naughty-worker1", "gpu1"))
        for k in ("cache types", "ctx", "quant")
    }
    worker = v.plan.service("naughty-worker0")
    kv = sum(p.kv for b, p in worker.buffers.items() if worker.device_of[b] == "gpu0")
    weights = sum(p.weights for b, p in worker.buffers.items() if worker.device_of[b] == "gpu0")
    t = trades[("naughty-worker0", "gpu0", "cache types")]
    assert (t.old, t.new) == ("f16/f16", "q8_0/q8_0")
    assert t.bytes == round(kv * (1 - (34 / 32) / 2))
    assert trades[("naughty-worker0", "gpu0", "ctx")].bytes == round(kv / 2)
    q = trades[("naughty-worker0", "gpu0", "quant")]
    assert (q.old, q.new) == ("q4_0", "q3_k")
    assert q.bytes == round(weights * (1 - 3.4375 / 4.5))
    # more room never buys less, and each is the speed model's own figure
    assert 0 < t.gain_tps <= q.gain_tps
    sp, rt = v.plan.service("grandpa"), v.spec.runtimes["ik_llama"].rules()
    m = plan_speed.machine(v.spec, v.services[0])
    assert isinstance(m, model.Machine)
    w = plan_speed.workload(sp, v.profiles["glm-5.1-iq3_ks"], rt, 32768)
    assert q.gain_tps == pytest.approx(model.marginal_gb(m, w, s.depth, "gpu0", q.bytes)[0])
    text = to_text(v.plan)
    assert (
        "naughty-worker0 cache types f16/f16 -> q8_0/q8_0 frees about "
        f"{round(t.bytes / 2**20):,} MiB on gpu0: grandpa {t.gain_tps:+.2f} tok/s"
    ) in text
    doc = json.loads(to_json(v.plan))["services"]["grandpa"]["speed"]
    assert {x["setting"] for x in doc["trades"]} == {"cache types", "ctx", "quant"}


def test_prefill_is_shown_where_compute_peaks_are_known(tmp_path: Path) -> None:
    v = validate_file(_familiar(tmp_path, "speed"))
    s = _speed(v)
    assert s.prefill_tps is not None and s.prefill_tps > 0 and s.ubatch == 8192
    assert f"prefill {s.prefill_tps:,.0f} tok/s at ubatch 8,192" in to_text(v.plan)


def test_the_heat_prior_is_uniform_without_evidence() -> None:
    assert heat.prior("qwen3moe", [0, 1, 2]) is heat.UNIFORM


def test_speed_is_the_default_and_places_as_head_tail_under_uniform_heat(tmp_path: Path) -> None:
    """Without a policy an auto service orders by heat; with no heat evidence (every
    architecture but glm-dsa) that is the head-tail order, so such plans do not move."""
    from layoutgen.spec.schema import ExpertsAuto

    assert ExpertsAuto().policy == "speed"
    text = _familiar(tmp_path, "head-tail").read_text()
    default = tmp_path / "default.yaml"
    default.write_text(text.replace("      policy: head-tail\n", ""))
    assert _gpu_layers(validate_file(default)) == set(range(3, 17))  # GLM's prior: the head
    # a qwen3next orchestrator (uniform heat): the same layers either way
    from specs import VALID

    placed = {}
    for name, policy in (("speed", ""), ("head-tail", "      policy: head-tail\n")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            VALID.replace(
                "    threads: 15\n", f"    threads: 15\n    experts:\n      mode: auto\n{policy}"
            )
        )
        sp = validate_file(path).plan.service("grandpa")
        placed[name] = {d: tuple(v) for d, v in sp.expert_layers.items()}
    assert placed["speed"] == placed["head-tail"]
    assert any(d != "host" and v for d, v in placed["speed"].items())
