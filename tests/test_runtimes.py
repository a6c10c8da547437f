"""Runtime versions select dated rules: each rule changes the plan at its build, not before.

Every rule is checked on both sides of its first build, on the layouts it
matters for (GLM-5.1 from seed 001): the build numbers and pull requests are
each project's history (``git rev-list --count`` at each merge commit; llama.cpp's
checked against its ``bNNNN`` release tags).
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest

from layoutgen import runtimes
from layoutgen.core.rules import VersionError, parse_version
from layoutgen.errors import InvalidInput
from layoutgen.inputs import source
from layoutgen.render.validate import validate_file
from layoutgen.runtimes.ik_llama_cpp import IkLlamaCpp, _share
from layoutgen.runtimes.llama_cpp import LlamaCpp
from layoutgen.solve.plan import to_json
from layoutgen.spec import flags

from conftest import ROOT

LAYOUTS = ROOT / "layouts"
MiB = 2**20


def _at(tmp_path: Path, layout: str, version: str | None) -> Path:
    """A bundled layout with its runtime's version replaced (None: removed), less the
    switches that build does not have (validate refuses them: layoutgen.spec.flags)."""
    text = (LAYOUTS / layout).read_text()
    text = text.replace("profile: models/", f"profile: {LAYOUTS}/models/")
    pinned = '    version: "4357"\n'
    assert pinned in text
    text = text.replace(pinned, "" if version is None else f'    version: "{version}"\n')
    for switch in ("--merge-qkv", "-muge"):  # ik PR builds 3940 and 4109
        spans = flags.table("ik_llama.cpp").rows[switch][1]
        if (
            version is not None
            and flags.at(flags.table("ik_llama.cpp"), spans, int(version)).span is None
        ):
            text = text.replace(f"{switch}, ", "")
    path = tmp_path / f"{version}-{layout}"
    path.write_text(text)
    return path


def _plan(tmp_path: Path, layout: str, version: str | None) -> dict:
    """The plan JSON; without a version the memory plan for every build (builds take
    different flags there, which validate refuses: layoutgen.solve.builds)."""
    path = _at(tmp_path, layout, version)
    if version is not None:
        return json.loads(to_json(validate_file(path).plan))
    from layoutgen.render.validate import validate_document
    from layoutgen.solve.solver import solve

    v = validate_document(source.load(path, str(path)), one_argv=False)
    return json.loads(to_json(solve(v.spec, v.services, v.profiles, str(path), one_argv=False)))


@pytest.mark.parametrize(
    ("text", "build", "date"),
    [
        ("b6123", 6123, None),
        ("6123", 6123, None),
        ("4327 (0871ab29)", 4327, None),
        ("2026-03-20", None, datetime.date(2026, 3, 20)),
    ],
)
def test_versions_as_runtimes_print_them(text: str, build: int | None, date: object) -> None:
    v = parse_version(text)
    assert (v.build, v.date) == (build, date)


@pytest.mark.parametrize("text", ["latest", "v4327-beta", "2026-13-01", "", "b", "4327-rc1"])
def test_a_version_that_names_no_build_is_refused(text: str) -> None:
    with pytest.raises(VersionError):
        parse_version(text)


def test_every_rule_has_a_source_and_builds_in_date_order() -> None:
    for kind in ("llama.cpp", "ik_llama.cpp"):
        rules = runtimes.get(kind).RULES
        assert [r.since_build for r in rules] == sorted(r.since_build for r in rules)
        assert [r.since for r in rules] == sorted(r.since for r in rules)
        for r in rules:
            # a pull request, a commit pushed without one, or the two releases whose
            # sources bracket the change
            bracketed = re.search(r"absent from release b\d+ .*present in b\d+", r.source)
            commit = re.search(r"\bcommit [0-9a-f]{9}\b", r.source)
            assert ("PR #" in r.source or bracketed or commit) and r.summary, r.source
        assert len({r.name for r in rules}) == len(rules)


@pytest.mark.parametrize(
    ("kind", "rule"),
    [
        *(("ik_llama.cpp", r.name) for r in IkLlamaCpp.RULES),
        *(("llama.cpp", r.name) for r in LlamaCpp.RULES),
    ],
)
def test_a_rule_applies_from_its_build_and_its_date(kind: str, rule: str) -> None:
    r = next(x for x in runtimes.get(kind).RULES if x.name == rule)
    assert runtimes.get(kind, str(r.since_build)).follows(rule)
    assert not runtimes.get(kind, str(r.since_build - 1)).follows(rule)
    assert runtimes.get(kind, r.since.isoformat()).follows(rule)
    day_before = (r.since - datetime.timedelta(days=1)).isoformat()
    assert not runtimes.get(kind, day_before).follows(rule)
    assert runtimes.get(kind).follows(rule)  # no version: the newest


@pytest.mark.parametrize(
    ("version", "mapped", "overridden", "cpu_layer_kv"),
    [
        ("b3989", "CPU", "CPU", "CUDA_Host"),  # 2024: mapped weights named CPU
        ("b3990", "CPU_Mapped", "CPU", "CUDA_Host"),  # #10026
        ("b4118", "CPU_Mapped", "CPU", "CPU"),  # #10358: KV on the layer's device
        ("b6049", "CPU_Mapped", "CUDA_Host", "CPU"),  # #14990: -ot CPU takes host buffers
    ],
)
def test_llama_cpp_host_buffers_by_build(
    version: str, mapped: str, overridden: str, cpu_layer_kv: str
) -> None:
    """Buffer names as each build prints them: mapped weights, tensors -ot sends to the
    CPU with --no-mmap beside a GPU, and a CPU layer's KV cache beside a GPU."""
    rt = runtimes.get("llama.cpp", version)
    assert rt.host_buffer(gpus=True, host_overrides=False, mmap=True) == mapped
    assert rt.expert_host_buffer(gpus=True, mmap=False) == overridden
    assert rt.expert_host_buffer(gpus=False, mmap=False) == "CPU"
    assert rt.cpu_layer_kv_buffer(gpus=True) == cpu_layer_kv
    assert rt.cpu_layer_kv_buffer(gpus=False) == "CPU"


@pytest.mark.parametrize(
    ("version", "fa_on", "fa_off", "stream"),
    [("b6867", 256, 32, 1), ("b6868", 1, 1, 1), ("b6975", 256, 256, 256)],
)
def test_llama_cpp_kv_padding_by_build(version: str, fa_on: int, fa_off: int, stream: int) -> None:
    """#16812 dropped the KV padding (256 with flash attention, 32 without), #17046 made
    it 256 always, for each sequence's stream too."""
    rt = runtimes.get("llama.cpp", version)
    assert (rt.ctx_padding(True), rt.ctx_padding(False), rt.stream_padding()) == (
        fa_on,
        fa_off,
        stream,
    )


@pytest.mark.parametrize(
    ("version", "n", "first", "output"),
    [
        ("b7466", 15, 17, False),  # phi3 (32 layers) at b2977: layers 17-31, output on CPU
        ("b7466", 33, 0, True),
        ("b7467", 15, 18, True),  # #18148: the output is one of the N, offloaded first
        ("b7467", 33, 0, True),
        ("b7467", 0, 32, False),
    ],
)
def test_llama_cpp_ngl_counts_the_output_since_7467(
    version: str, n: int, first: int, output: bool
) -> None:
    assert runtimes.get("llama.cpp", version).gpu_layers(32, n) == (first, output)


def test_split_by_size_since_4327_by_count_before(tmp_path: Path) -> None:
    """GLM-5.1 on 2 GPUs: the count split halves 79 layers + output at i/80 < 1/2, so
    blk.0-39 on CUDA0; ik's size split weighs the dense layers 0-2 and the output
    (seed 001: CUDA0 7378.05 MiB, CUDA1 7120.90) and moves the boundary."""
    count = _plan(tmp_path, "glm51-2-cpu-moe-2gpu.yaml", "4326")["services"]["grandpa"]
    size = _plan(tmp_path, "glm51-2-cpu-moe-2gpu.yaml", "4327")["services"]["grandpa"]
    assert count["layers"]["CUDA0"] == list(range(40))
    assert size["layers"]["CUDA0"] != count["layers"]["CUDA0"]


def test_nextn_layer_kv_before_3918(tmp_path: Path) -> None:
    """Before ik PR #843 the unused nextn layer (blk.78) got a KV cache like the others:
    78 layers x 576 x q8_0 x 32768 cells = 1491.79 MiB (seed 001), one more layer before."""
    layout = "glm51-3-cpu-moe-1gpu.yaml"
    new = _plan(tmp_path, layout, "3918")["services"]["grandpa"]["buffers"]["CUDA0"]["kv"]
    old = _plan(tmp_path, layout, "3917")["services"]["grandpa"]["buffers"]["CUDA0"]["kv"]
    per_layer = 576 // 32 * 34 * 32768  # q8_0: 34 bytes per 32 values
    assert f"{new / MiB:.2f}" == "1491.79"  # as seed 001 logged
    assert old - new >= per_layer


def test_host_experts_offload_by_expert_share_since_3745() -> None:
    """ik PR #520: a MoE matmul with host experts runs on the first GPU (copying the
    expert in) only when ubatch x n_expert_used >= 32 x n_expert; before, from 32
    tokens on.  GLM-5.1 (256 experts, 8 used) at -ub 512: 4096 < 8192."""
    from layoutgen.models.profile import load_profile
    from layoutgen.runtimes.ik_llama_cpp.placement import offload_copy

    glm = load_profile(LAYOUTS / "models" / "glm-5.1-iq3_ks.yaml")
    assert offload_copy(glm, 512, {}, merge_up_gate=False, by_share=True) == 0
    assert offload_copy(glm, 512, {}, merge_up_gate=False, by_share=False) == 1638 * MiB
    assert offload_copy(glm, 1024, {}, merge_up_gate=False, by_share=True) == 1638 * MiB
    assert runtimes.get("ik_llama.cpp", "3744").follows("offload-by-expert-share") is False


def test_f16_mask_since_3907(tmp_path: Path) -> None:
    """Seed 001's CUDA_Host compute, 704.09 MiB at ctx 32768 and -ub 8192 with flash
    attention: the f16 mask (32768 x 8192 x 2 B = 512 MiB) and the embeddings' rows
    (6144 x 8192 x 4 B = 192 MiB); builds before ik PR #825 kept the mask in f32."""
    layout = "glm51-2-cpu-moe-2gpu.yaml"

    def host(v: str) -> int:
        return _plan(tmp_path, layout, v)["services"]["grandpa"]["buffers"]["CUDA_Host"]["compute"]

    assert f"{host('3941') / MiB:.0f}" == "704"
    # before 3907 the mask is f32; before 3941 the two GPUs also run pipeline
    # parallelism despite --cpu-moe (ik PR #879), 4 copies of every input.  The layout
    # does not fit there (every host expert tensor once per copy on CUDA0, ik discussion
    # 816), so its figures come from the plan of a layout that does not fit
    from layoutgen.solve.solver import solve_at

    v = validate_file(_at(tmp_path, layout, "3941"))
    rt = v.spec.runtimes["ik_llama"].model_copy(update={"version": "3906"})
    older = v.spec.model_copy(update={"runtimes": {"ik_llama": rt}})
    plan = solve_at(older, v.services, v.profiles, "3906", fit=False)
    assert plan.service("grandpa").buffers["CUDA_Host"].compute == 4 * (1024 + 192) * MiB


@pytest.mark.parametrize(
    ("version", "flags"),
    [("3927", ["-fa"]), ("3928", []), ("3988", []), ("3989", ["-fa", "on"])],
)
def test_flash_attention_as_each_build_spells_it(version: str, flags: list[str]) -> None:
    rt = runtimes.get("ik_llama.cpp", version)
    assert rt.flash_attn_flags(True) == flags
    off = rt.flash_attn_flags(False)
    assert (
        off == {"3927": [], "3928": ["-no-fa"], "3988": ["-no-fa"], "3989": ["-fa", "off"]}[version]
    )


def test_n_cpu_moe_one_gpu_counts_from_the_end_since_4797(tmp_path: Path) -> None:
    """--n-cpu-moe 64 on one GPU: seed 001's build kept blk.3-63 on the host (the
    first 64 layers); since ik PR #2262 the last 64 MoE layers before nextn go."""
    layout = "glm51-4-n-cpu-moe-64-1gpu.yaml"
    old = _plan(tmp_path, layout, "4796")["services"]["grandpa"]["expert_layers"]
    new = _plan(tmp_path, layout, "4797")["services"]["grandpa"]["expert_layers"]
    assert old["host"] == list(range(3, 64)) and old["gpu1"] == list(range(64, 78))
    assert new["host"] == list(range(14, 78)) and new["gpu1"] == list(range(3, 14))


def test_n_cpu_moe_over_two_gpus_is_shared_by_device_since_4325() -> None:
    """ik's create_tensors_helper: round(count x n / n_layer) per device, corrected one
    at a time toward the exact share (C roundf: halves away from zero)."""
    assert _share([40, 39], 64, 79) == [32, 32]
    assert _share([1, 1], 1, 2) == [0, 1]  # 0.5 + 0.5 rounds to 2; the first gives back
    assert _share([3, 3, 3], 2, 9) == [0, 1, 1]
    assert sum(_share([10, 20, 49], 33, 79)) == 33


def test_reasoning_budget_flag_since_3870() -> None:
    assert runtimes.get("ik_llama.cpp", "3870").reasoning_off() == ["--reasoning-budget", "0"]
    assert runtimes.get("ik_llama.cpp", "3869").reasoning_off() == []


def test_the_plan_says_which_rules_it_assumed(tmp_path: Path) -> None:
    pinned = _plan(tmp_path, "glm51-3-cpu-moe-1gpu.yaml", "4327")["runtimes"]["ik_llama"]
    assert pinned["version"] == "4327" and pinned["rules"] == "as of this version"
    every = _plan(tmp_path, "glm51-3-cpu-moe-1gpu.yaml", None)["runtimes"]["ik_llama"]
    assert every["version"] is None and every["rules"] == "every build"
    assert "ik_llama.cpp build 4840" in every["read_from"]
    # each epoch of the rules, oldest first, with what it books on each device
    builds = [e["builds"] for e in every["epochs"]]
    # from 4196, the first ik build that loads glm-dsa (runtimes.ik_llama_cpp.arch_since)
    assert builds[0].startswith("builds 4196-") and builds[-1].startswith("builds from ")
    assert all(e["devices"]["host"] > 0 for e in every["epochs"])


def test_worst_graph_tokens_shrink_the_logits_since_4378(tmp_path: Path) -> None:
    """ik PR #1560: -wgt N reserves logits for N tokens.  Seed 001's two-GPU layout at
    -ub 8192: CUDA1 holds the output, 154880 x 8192 x 4 B = 4840 MiB of logits; with
    -wgt 512 they are 302.5 MiB, and the layer's own peak takes over."""
    layout = "glm51-2-cpu-moe-2gpu.yaml"
    text = _at(tmp_path, layout, "4378").read_text()
    wgt = tmp_path / "wgt.yaml"
    wgt.write_text(text.replace("args: [", 'args: [-wgt, "512", ', 1))

    def cuda1(path: Path) -> int:
        plan = json.loads(to_json(validate_file(path).plan))
        return plan["services"]["grandpa"]["buffers"]["CUDA1"]["compute"]

    full, small = cuda1(_at(tmp_path, layout, "4378")), cuda1(wgt)
    streams = 2 * 6144 * 8192 * 4
    assert full == 154880 * 8192 * 4 + streams  # the output phase: 5224 MiB
    assert 154880 * 512 * 4 + streams < small < full  # a layer's peak now decides
    older = tmp_path / "older.yaml"
    older.write_text(wgt.read_text().replace('version: "4378"', 'version: "4377"'))
    with pytest.raises(InvalidInput, match=r"-wgt is not in ik_llama\.cpp 4377"):
        cuda1(older)  # no -wgt before 4378: that server would refuse the flag
    assert cuda1(_at(tmp_path, layout, "4377")) == full  # the whole ubatch


@pytest.mark.parametrize(
    ("version", "mmap", "experts", "others"),
    [
        ("4352", True, "CPU", "CPU"),  # 2025 logs with mmap: mapped CPU buffers only
        ("4352", False, "CPU", "CUDA_Host"),  # a 2025 log with --no-mmap: CPU + CUDA_Host
        ("4353", True, "CPU", "CPU"),
        ("4353", False, "CUDA_Host", "CUDA_Host"),  # #1508: pinned without mmap
        ("4357", True, "CUDA_Host", "CUDA_Host"),  # #1510: pinned, mmap off (seed 001)
    ],
)
def test_ik_host_buffer_names_by_build(version: str, mmap: bool, experts: str, others: str) -> None:
    rt = runtimes.get("ik_llama.cpp", version)
    assert rt.expert_host_buffer(gpus=True, mmap=mmap) == experts
    assert rt.host_buffer(gpus=True, host_overrides=True, mmap=mmap) == others


@pytest.mark.parametrize(
    "text",
    ["4327\n", " 4327", "4327 ", "4327\nPodmanArgs=--privileged", "b\x1b[31m", "x" * 500, "٤٣٢٧"],
)
def test_a_version_is_checked_as_written(text: str) -> None:
    """No stripping, no Unicode digits: what is checked is what the plan carries."""
    with pytest.raises(VersionError) as caught:
        parse_version(text)
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and len(message) < 400


@pytest.mark.parametrize(
    ("version", "isa", "types", "buffer"),
    [
        ("b4281", "x86-64-v3", set(), None),
        ("b4282", "x86-64-v3", {"q4_0"}, "CPU_AARCH64"),  # #10446: x86 repacks q4_0
        ("b4929", "x86-64-v3", {"q4_0", "q4_k"}, "CPU_AARCH64"),  # #12332
        ("b5615", "x86-64-v3", {"q4_0", "q4_k"}, "CPU_REPACK"),  # #13892 renames it
        ("b6144", "x86-64-v4", {"q4_0", "q4_k", "q2_k", "iq4_nl"}, "CPU_REPACK"),
        ("b4080", "aarch64", set(), None),
        ("b4081", "aarch64", {"q4_0"}, "CPU_AARCH64"),  # #9921: ARM first
        ("b8175", "aarch64", {"q4_0", "q4_k", "q8_0", "q5_k", "q6_k", "iq4_nl"}, "CPU_REPACK"),
        # NEON without the dot product: every ARM layout wants it (or i8mm)
        ("b8175", "aarch64-v8.0", set(), None),
        ("b8175", "x86-64", set(), None),
    ],
)
def test_llama_cpp_repacks_each_type_from_its_build(
    version: str, isa: str, types: set[str], buffer: str | None
) -> None:
    """Which matrices the CPU backend repacks grew type by type; a 2024 build kept
    q4_K mapped (pythia q4_K_M at b4343: every matrix in CPU_Mapped)."""
    from layoutgen.models.profile import load_profile

    profile = load_profile(ROOT / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml")
    got = runtimes.get("llama.cpp", version).repacked(profile, isa, [])
    by_type = {t.name: t.type.lower() for t in profile.tensors()}
    assert {by_type[n] for n in got} <= types
    if "q4_0" in types:
        assert got and {b for b, _ in got.values()} == {buffer}
    else:
        assert not got


def _host_compute(tmp_path: Path, version: str) -> tuple[int, int, int, int]:
    """The CUDA_Host compute of a two-GPU llama.cpp service at ``version``, with what
    sizes its inputs: (compute, cells, ubatch, n_embd)."""
    from test_tensor_placement import _spec

    tmp_path.mkdir()
    path = _spec(tmp_path, "    experts: gpu\n    parallel: 1\n")
    text = path.read_text().replace("version: b6123", f"version: {version}")
    path.write_text(text.replace("vram: 24GiB", "vram: 32GiB"))
    v = validate_file(path)
    rs = next(r for r in v.services if r.name == "w")
    sp = v.plan.service("w")
    assert rs.service.ctx == 32768 and rs.parallel == 1
    return sp.buffers["CUDA_Host"].compute, 32768, rs.ubatch, v.profiles["q"].hparams.n_embd


def test_llama_cpp_host_inputs_by_build(tmp_path: Path) -> None:
    """The host side beside GPUs holds the graph inputs: before b9415 the flash-attention
    KQ mask is an f32 input cast to f16 on the GPU (4 bytes a cell, not 2), and before
    b11401 one embeddings block per pipeline copy instead of the mixed batch's
    (2 per copy + 2).  The b5192-b5274 logs: CUDA_Host = f32 mask + one block."""
    before_mask, cells, ub, e = _host_compute(tmp_path / "a", "b9409")
    after_mask = _host_compute(tmp_path / "b", "b9415")[0]
    copies = 4  # two GPUs, no overrides: pipeline parallelism's copies of every input
    assert before_mask - after_mask == copies * cells * ub * 2
    before_mixed = _host_compute(tmp_path / "c", "b11393")[0]
    after_mixed = _host_compute(tmp_path / "d", "b11401")[0]
    assert after_mixed - before_mixed == (copies * 2 + 2 - copies) * e * ub * 4
