"""Placement at tensor granularity (issue 14): single expert tensors, user -ot rules.

The runtimes read ``-ot`` by regex search, first match wins; each test reads
the rendered argv that way (tests/test_argv.py's reader, independent of the
solver) or checks the solver's own account against the profile's tensors.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_argv import _rules

from layoutgen.core.override import apply, expert_rules
from layoutgen.core.placement import expert_layer, loaded
from layoutgen.errors import Diagnostic
from layoutgen.render.validate import validate_file, validate_files

from conftest import ROOT
from specs import PROFILE

SEED_001 = ROOT / "layouts" / "familiar-final.yaml"

SPEC = f"""\
host:
  name: t
  cpu: {{cores: 8, threads: 16}}
  ram: 256GiB
  ram_reserve: 8GiB
  podman: "5.4"
  gpus:
    - {{id: gpu0, index: 0, vram: 24GiB, reserve: 512MiB}}
    - {{id: gpu1, index: 1, vram: 24GiB, reserve: 512MiB}}
models:
  q: {{path: /m/q.gguf, profile: {PROFILE}}}
runtimes:
  llama: {{kind: llama.cpp, image: "ghcr.io/ggml-org/llama.cpp:server-cuda-b6123", version: b6123}}
  ik: {{kind: ik_llama.cpp, image: "registry.home.arpa/ik_llama.cpp:4357", version: "4357"}}
services:
  w:
    model: q
    runtime: RUNTIME
    role: worker
    port: 8080
    ctx: 32768
    gpus: [gpu0, gpu1]
"""


def _spec(tmp_path: Path, service: str, runtime: str = "llama") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("RUNTIME", runtime) + service)
    return path


def _diagnostics(path: Path) -> tuple[Diagnostic, ...]:
    (result,) = validate_files([(path, str(path))])
    return result.diagnostics


def _messages(path: Path) -> list[str]:
    return [d.message for d in _diagnostics(path)]


def test_seed_001_auto_uses_the_vram_whole_layers_leave() -> None:
    """The final seed 001 layout left 2,273 and 2,721 MiB free with whole layers
    (4,088 MiB each); now single tensors fill that, until no GPU has room for the
    next piece of any host-resident expert layer."""
    v = validate_file(SEED_001)
    sp = v.plan.service("grandpa")
    rs = next(r for r in v.services if r.name == "grandpa")
    rt = v.spec.runtimes[rs.service.runtime].rules()
    profile = v.profiles[rs.service.model]
    singles = [t for ts in sp.expert_tensors.values() for t in ts]
    assert singles, "no single expert tensor placed"
    on_gpu = set(singles)
    sizes = {t.name: t.nbytes for t in loaded(profile, rt)}
    pieces: list[int] = []
    for layer in sp.expert_layers.get("host", ()):
        names = [f"blk.{layer}.ffn_{k}_exps.weight" for k in ("gate", "up", "down")]
        left = [n for n in names if n not in on_gpu and n in sizes]
        # ik_llama.cpp reads up and gate in one op: they move together
        upgate = sum(sizes[n] for n in left if "_down_" not in n)
        down = sum(sizes[n] for n in left if "_down_" in n)
        pieces += [p for p in (upgate, down) if p]
    smallest = min(pieces)
    for gpu in rs.gpus:
        assert v.plan.device(gpu).free < smallest, gpu
    # ...and ik's up and gate of a layer never sit apart
    for name in singles:
        if "_gate_exps" in name:
            partner = name.replace("_gate_exps", "_up_exps")
            dev = next(d for d, ts in sp.expert_tensors.items() if name in ts)
            assert partner in sp.expert_tensors[dev]


def test_single_tensor_rules_are_one_per_device_and_kind() -> None:
    rules = expert_rules(
        {"CUDA0": [3, 4, 5]},
        {"CUDA1": ["blk.7.ffn_down_exps.weight", "blk.9.ffn_down_exps.weight"]},
    )
    assert [r.target for r in rules] == ["CUDA0", "CUDA1"]
    names = [f"blk.{n}.ffn_{k}_exps.weight" for n in range(12) for k in ("up", "gate", "down")]
    got = apply(rules, names)
    assert {n for n, t in got.items() if t == "CUDA1"} == {
        "blk.7.ffn_down_exps.weight",
        "blk.9.ffn_down_exps.weight",
    }
    assert {n for n, t in got.items() if t == "CUDA0"} == {
        f"blk.{n}.ffn_{k}_exps.weight" for n in (3, 4, 5) for k in ("up", "gate", "down")
    }


def test_user_rules_come_first_and_the_plan_follows_them(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        "    experts: gpu\n"
        "    tensor_overrides:\n"
        "      - {pattern: 'blk\\.(1[2-9])\\.ffn_', device: host}\n"
        "      - {pattern: 'blk\\.30\\.ffn_down_exps', device: gpu0}\n",
    )
    v = validate_file(path)
    assert v.plan is not None, [d.message for d in v.diagnostics]
    sp = v.plan.service("w")
    rs = v.services[0]
    profile = v.profiles["q"]
    rt = v.spec.runtimes["llama"].rules()
    names = [t.name for t in loaded(profile, rt)]
    got = apply(_rules(sp.argv), names)
    # the argv's first rules are the user's, as written
    ot = [sp.argv[i + 1] for i, a in enumerate(sp.argv) if a == "-ot"]
    assert ot[:2] == ["blk\\.(1[2-9])\\.ffn_=CPU", "blk\\.30\\.ffn_down_exps=CUDA0"]
    # every tensor of layers 12-19's FFN (norms, router, shared and routed experts)
    # goes to the host, and nothing else does
    ffn = re.compile(r"^blk\.(1[2-9])\.ffn_")
    assert {n for n, t in got.items() if t == "CPU"} == {n for n in names if ffn.search(n)}
    assert {n for n, b in sp.moved.items() if b in ("CPU", "CPU_Mapped")} == {
        n for n in names if ffn.search(n)
    }
    # layer 30 sits on the second GPU; its down experts were moved to the first
    assert sp.layer_buffer[30] == "CUDA1"
    assert sp.moved["blk.30.ffn_down_exps.weight"] == "CUDA0"
    assert got["blk.30.ffn_down_exps.weight"] == "CUDA0"
    # the host buffer holds exactly the moved bytes (mapped weights: token_embd too)
    moved_bytes = sum(t.nbytes for t in loaded(profile, rt) if ffn.search(t.name))
    embd = next(t.nbytes for t in loaded(profile, rt) if t.name == "token_embd.weight")
    assert sp.buffers["CPU_Mapped"].weights == moved_bytes + embd
    assert rs.gpus == ("gpu0", "gpu1")


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("{pattern: 'no_such_tensor', device: host}", "matches none of the"),
        ("{pattern: 'blk', device: gpu7}", "'gpu7' is neither 'host' nor one of"),
    ],
)
def test_bad_rules_are_refused_with_their_place(tmp_path: Path, rule: str, fragment: str) -> None:
    path = _spec(tmp_path, f"    experts: gpu\n    tensor_overrides:\n      - {rule}\n")
    (diag,) = [d for d in _diagnostics(path) if fragment in d.message]
    assert diag.line == 25 and diag.severity == "error"  # the rule's line


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("'a,b'", "contains ','"),
        ("'a=b'", "contains '='"),
        ("'(unclosed'", "is not a regex"),
        ("''", "empty pattern"),
    ],
)
def test_patterns_the_runtime_cannot_take_are_refused(
    tmp_path: Path, pattern: str, fragment: str
) -> None:
    path = _spec(tmp_path, f"    tensor_overrides: [{{pattern: {pattern}, device: host}}]\n")
    messages = _messages(path)
    assert any(fragment in m for m in messages), messages


def test_a_rule_shadowed_by_an_earlier_one_is_a_warning(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        "    tensor_overrides:\n"
        "      - {pattern: 'blk\\.1[2-9]\\.ffn', device: host}\n"
        "      - {pattern: 'blk\\.13\\.ffn_up', device: gpu0}\n",
    )
    v = validate_file(path)
    assert v.plan is not None
    (warning,) = [d for d in v.warnings if "taken by an earlier rule" in d.message]
    assert warning.severity == "warning" and warning.line == 25


def test_explicit_single_tensors_land_where_named(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        "    experts:\n"
        "      mode: explicit\n"
        "      layers: {gpu0: [0-3]}\n"
        "      tensors: {gpu1: [blk.5.ffn_down_exps, blk.6.ffn_up_exps.weight]}\n",
    )
    v = validate_file(path)
    assert v.plan is not None, [d.message for d in v.diagnostics]
    sp = v.plan.service("w")
    assert sp.expert_tensors == {"gpu1": ("blk.5.ffn_down_exps.weight", "blk.6.ffn_up_exps.weight")}
    profile, rt = v.profiles["q"], v.spec.runtimes["llama"].rules()
    names = [t.name for t in loaded(profile, rt) if expert_layer(t.name) is not None]
    got = apply(_rules(sp.argv), names)
    for name, target in got.items():
        layer = expert_layer(name)
        assert layer is not None
        where = target or sp.layer_buffer[layer]  # no rule: with its layer
        if name in ("blk.5.ffn_down_exps.weight", "blk.6.ffn_up_exps.weight"):
            assert where == "CUDA1", name
        elif layer <= 3:
            assert where == "CUDA0", name
        else:
            assert where == "CPU", name


def test_ik_keeps_up_and_gate_together(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        "    experts: {mode: explicit, tensors: {gpu1: [blk.6.ffn_up_exps]}}\n",
        runtime="ik",
    )
    messages = _messages(path)
    assert any(
        "blk.6.ffn_up_exps.weight without blk.6.ffn_gate_exps.weight" in m for m in messages
    ), messages


def test_a_tensor_and_its_layer_cannot_both_be_named(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        "    experts:\n"
        "      {mode: explicit, layers: {gpu0: [5]}, tensors: {gpu1: [blk.5.ffn_down_exps]}}\n",
    )
    assert any("list the layer or its tensors, not both" in m for m in _messages(path))


def test_not_an_expert_tensor_is_refused(tmp_path: Path) -> None:
    path = _spec(tmp_path, "    experts: {mode: explicit, tensors: {gpu1: [blk.5.attn_q]}}\n")
    assert any("is not a routed-expert tensor" in m for m in _messages(path))


def test_ngl_0_keeps_every_layer_on_the_cpu_and_the_first_gpu_computes(tmp_path: Path) -> None:
    """-ngl 0 on a CUDA build: weights, KV and output in host RAM; llama.cpp still runs
    big-batch matmuls of host weights on the first GPU, copying one weight at a time
    into its compute buffer; the second GPU gets no node and no buffer."""
    path = _spec(tmp_path, "    experts: gpu\n    gpu_layers: 0\n")
    v = validate_file(path)
    sp = v.plan.service("w")
    assert sp.layer_buffer == {}
    assert " -ngl 0 " in " ".join(sp.argv)
    profile, rt = v.profiles["q"], v.spec.runtimes["llama"].rules()
    largest = max(t.nbytes for t in loaded(profile, rt) if t.name != "token_embd.weight")
    assert sp.buffers["CUDA0"].compute > largest
    assert sp.buffers["CUDA0"].weights == sp.buffers["CUDA0"].kv == 0
    assert sp.buffers["CUDA0"].basis["compute"] == "upper-bound"
    assert "CUDA1" not in sp.buffers or sp.buffers["CUDA1"].compute == 0
    assert sum(p.kv for p in sp.buffers.values()) == sp.buffers["CPU"].kv > 0
    host = sum(p.weights for b, p in sp.buffers.items() if sp.device_of[b] == "host")
    assert host == sum(t.nbytes for t in loaded(profile, rt))


def test_rules_moving_a_layers_own_ops_warn_that_compute_is_not_derived(tmp_path: Path) -> None:
    """A rule that moves norms, the router or shared experts splits the layer's ops over
    devices; a rule that moves routed experts only does not warn."""
    ops = _spec(
        tmp_path, "    tensor_overrides: [{pattern: 'blk\\.1[2-9]\\.ffn_', device: host}]\n"
    )
    warned = [d for d in validate_file(ops).warnings if "other than routed experts" in d.message]
    assert len(warned) == 1 and warned[0].line == 23
    assert "blk.12.ffn_gate_inp.weight" in warned[0].message
    experts = _spec(
        tmp_path, "    tensor_overrides: [{pattern: 'blk\\.1[2-9]\\.ffn_.*_exps', device: host}]\n"
    )
    assert not [d for d in validate_file(experts).warnings if "routed experts" in d.message]


def test_ik_counts_ngl_over_repeating_layers_and_keeps_the_output_on_the_cpu(
    tmp_path: Path,
) -> None:
    """ik_llama.cpp's -ngl N offloads the last N repeating layers and the output only
    when N exceeds them (llm_load_tensors: i_gpu_start = n_layer - N); llama.cpp counts
    the output as one of the N (since its build 7467).  The same N = 48 on this
    48-layer model: every layer on the GPUs with the output left on the CPU on ik,
    one layer fewer on llama.cpp."""
    ik = validate_file(_spec(tmp_path, "    experts: gpu\n    gpu_layers: 48\n", "ik"))
    sp = ik.plan.service("w")
    assert sorted(sp.layer_buffer) == list(range(48))
    assert sp.buffers["CUDA0"].basis["compute"] == "upper-bound"
    assert " -ngl 48 " in " ".join(sp.argv)
    # llama.cpp since build 7467 (PR #18148): the output is one of the N
    newer = _spec(tmp_path, "    experts: gpu\n    gpu_layers: 48\n")
    newer.write_text(newer.read_text().replace("b6123", "b7467"))
    assert sorted(validate_file(newer).plan.service("w").layer_buffer) == list(range(1, 48))
    # one more is every layer and the output, as -ngl 999 is: nothing partial is left
    full = validate_file(_spec(tmp_path, "    experts: gpu\n    gpu_layers: 49\n", "ik"))
    fp = full.plan.service("w")
    assert sorted(fp.layer_buffer) == list(range(48))
    assert fp.buffers["CUDA0"].basis["compute"] == "estimated"
    profile, rt = ik.profiles["q"], ik.spec.runtimes["ik"].rules()
    output = next(t.nbytes for t in loaded(profile, rt) if t.name == "output.weight")

    def host(plan_service: object) -> int:
        buffers = plan_service.buffers  # type: ignore[attr-defined]
        device_of = plan_service.device_of  # type: ignore[attr-defined]
        return sum(p.weights for b, p in buffers.items() if device_of[b] == "host")

    # the output's bytes, and its alignment padding in the host buffer
    assert output <= host(sp) - host(fp) < output + (64 << 10)


def test_ik_keeps_a_cpu_layers_kv_in_pinned_host_memory(tmp_path: Path) -> None:
    """A CPU layer's buffer type on ik is llama_default_buffer_type_cpu(true): pinned
    CUDA_Host on a CUDA build, KV included (a llama-2 at -ngl 0 logged CUDA_Host KV
    400 MiB); llama.cpp puts it on its CPU device.  The split over the two GPUs counts
    only the offloaded layers (act_gpu_layers = N without the output)."""
    v = validate_file(_spec(tmp_path, "    experts: gpu\n    gpu_layers: 20\n", "ik"))
    sp = v.plan.service("w")
    assert sorted(sp.layer_buffer) == list(range(28, 48))
    per_layer = {b: sum(1 for x in sp.layer_buffer.values() if x == b) for b in ("CUDA0", "CUDA1")}
    assert per_layer == {"CUDA0": 10, "CUDA1": 10}
    kv = {b: p.kv for b, p in sp.buffers.items() if p.kv}
    assert set(kv) == {"CUDA0", "CUDA1", "CUDA_Host"}
    assert kv["CUDA_Host"] * 20 == pytest.approx((kv["CUDA0"] + kv["CUDA1"]) * 28, rel=0.01)
    llama = validate_file(_spec(tmp_path, "    experts: gpu\n    gpu_layers: 20\n")).plan
    assert {b for b, p in llama.service("w").buffers.items() if p.kv} == {"CUDA0", "CUDA1", "CPU"}


def test_ik_ngl_0_copies_the_largest_host_weight_to_the_first_gpu(tmp_path: Path) -> None:
    """-ngl 0 on ik: every weight on the host; big batches run each host matmul on the
    first GPU, which holds the largest weight's copy, its output and the normed input
    (a llama-2 13B Q8_0 at -ub 512 logged 248.54 MiB: output 166.02 + logits 62.5 +
    2 x 10)."""
    v = validate_file(_spec(tmp_path, "    experts: gpu\n    gpu_layers: 0\n", "ik"))
    sp = v.plan.service("w")
    assert sp.layer_buffer == {}
    profile, rt = v.profiles["q"], v.spec.runtimes["ik"].rules()
    out = next(t for t in loaded(profile, rt) if t.name == "output.weight")
    ub = next(r for r in v.services if r.name == "w").ubatch
    assert sp.buffers["CUDA0"].compute >= out.nbytes + out.shape[1] * ub * 4
    assert "CUDA1" not in sp.buffers or sp.buffers["CUDA1"].compute == 0


def test_a_blas_build_computes_host_weights_matmuls_in_a_cpu_buffer(tmp_path: Path) -> None:
    """llama.cpp built with GGML_BLAS: the BLAS backend takes big-batch matmuls of host
    weights (the scheduler asks it before offloading to the first GPU) into a buffer of
    its own named CPU, beside CUDA_Host; at -ngl 0 its widest group is the output head:
    the normed input copied from the GPU and the logits, 4 x ubatch x (n_embd + n_vocab)
    (Qwen3-235B at b5269, -ub 512: 304.75 MiB logged)."""
    path = _spec(tmp_path, "    experts: gpu\n    gpu_layers: 0\n")
    plain = validate_file(path).plan.service("w")
    assert plain.buffers["CPU"].compute == 0  # the CPU layers' KV only
    path.write_text(path.read_text().replace("version: b6123}", "version: b6123, blas: true}"))
    v = validate_file(path)
    sp = v.plan.service("w")
    hp = v.profiles["q"].hparams
    ub = next(r for r in v.services if r.name == "w").ubatch
    assert sp.buffers["CPU"].compute == 4 * ub * ((hp.n_embd or 0) + (hp.vocab or 0))
    assert sp.buffers["CPU"].kv == plain.buffers["CPU"].kv and sp.device_of["CPU"] == "host"
    # every layer on the GPUs: no host matmul, no BLAS buffer
    path.write_text(path.read_text().replace("    gpu_layers: 0\n", ""))
    assert "CPU" not in validate_file(path).plan.service("w").buffers


def test_blas_is_refused_on_a_runtime_it_is_not_planned_for(tmp_path: Path) -> None:
    path = _spec(tmp_path, "    experts: gpu\n", "ik")
    path.write_text(path.read_text().replace('version: "4357"}', 'version: "4357", blas: true}'))
    (message,) = [m for m in _messages(path) if "blas" in m]
    assert "planned for llama.cpp only" in message and "remove 'blas'" in message


def test_a_row_split_of_a_moe_model_is_refused(tmp_path: Path) -> None:
    """ggml-cuda's mul_mat_id does not read a split buffer: -sm row would abort at the
    first batch of a model whose expert stacks the loader puts there."""
    path = _spec(tmp_path, "    experts: gpu\n    split_mode: row\n")
    (message,) = [m for m in _messages(path) if "split_mode" in m]
    assert "routed experts" in message and "write split_mode: layer" in message
