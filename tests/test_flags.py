"""Closed-world passthrough flags (issue 30 item 5): every ``args`` item is read as
the runtime's own parser reads it at the spec's build, through ``validate``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutgen.errors import Diagnostic, InvalidInput, Severity
from layoutgen.render.validate import validate_file
from layoutgen.spec import flags
from tests.specs import ROOT, VALID

RUNTIMES = ("llama.cpp", "ik_llama.cpp", "vllm")
NEWEST = {"llama.cpp": "11434", "ik_llama.cpp": "4840", "vllm": "0.33.0"}


def _quote(item: str) -> str:
    return "'" + item.replace("'", "''") + "'"


def _spec(kind: str, version: str | None, args: list[str]) -> str:
    """VALID's worker0 (or seed 004's vLLM 'genesis') with ARGS, on KIND at VERSION."""
    listed = "[" + ", ".join(_quote(a) for a in args) + "]"
    if kind == "vllm":
        text = (ROOT / "layouts" / "vllm-tower-seed004.yaml").read_text()
        text = text.replace("profile: models/", f"profile: {ROOT}/layouts/models/")
        text, n = re.subn(
            r"(?m)^    args: \[--default-chat-template-kwargs.*$", f"    args: {listed}", text
        )
        assert n == 1
        text = text.replace('version: "0.19.2rc1"', f'version: "{version}"' if version else "")
        return text
    text = VALID.replace("kind: ik_llama.cpp", f"kind: {kind}")
    text = text.replace('version: "4840"', f'version: "{version}"' if version else "")
    return text.replace("    cache_type_k: q8_0\n", f"    cache_type_k: q8_0\n    args: {listed}\n")


def _validate(tmp_path: Path, kind: str, version: str | None, args: list[str]) -> list[Diagnostic]:
    """Every diagnostic validate gives (errors raise, warnings come with the plan)."""
    path = tmp_path / "spec.yaml"
    path.write_text(_spec(kind, version, args))
    try:
        return list(validate_file(path).warnings)
    except InvalidInput as exc:
        return exc.diagnostics


def _errors(diags: list[Diagnostic]) -> dict[int, str]:
    """args index -> the error about it (only errors about args)."""
    out: dict[int, str] = {}
    for d in diags:
        m = re.search(r"services\.\w+\.args\[(\d+)\]: ", d.message)
        if m and d.severity is Severity.ERROR:
            assert d.line > 0 and d.col > 0, d  # located in the file
            out.setdefault(int(m[1]), d.message)
    return out


def _value(kind: str, spelling: str) -> list[str]:
    """SPELLING with as many values as the newest build reads."""
    arity = flags.table(kind).rows[spelling][1][-1].arity
    return [spelling, *(["1"] * max(arity, 0))]


def _owned(kind: str) -> set[str]:
    from layoutgen.runtimes.vllm import Vllm
    from layoutgen.spec.checks import OWNED

    if kind == "vllm":
        assert Vllm.OWNED_FLAGS is not None
        return {"--api-key", *(f for fs, _ in Vllm.OWNED_FLAGS for f in fs)}
    return {f for o in OWNED for f in o.flags}


@pytest.mark.parametrize("kind", RUNTIMES)
def test_every_flag_a_runtime_lacks_is_refused_where_it_is_written(
    tmp_path: Path, kind: str
) -> None:
    """Each spelling the other runtimes' parsers take and this one's never did: one
    located error each, naming the runtime."""
    mine = flags.table(kind).rows
    lacking = sorted(
        {s for other in RUNTIMES if other != kind for s in flags.table(other).rows}
        - set(mine)
        - _owned(kind)
    )
    if kind == "vllm":
        # argparse reads '-nX' as -n with the value X, -O3 as the compilation level,
        # and a unique start of an option's name as the option
        lacking = [
            s
            for s in lacking
            if (s.startswith("--") or s[:2] not in mine) and not s.startswith("-O")
            if not any(m.startswith(s) for m in mine)
        ]
    assert len(lacking) > 100
    errors = _errors(_validate(tmp_path, kind, NEWEST[kind], lacking))
    assert sorted(errors) == list(range(len(lacking)))
    label = "vLLM" if kind == "vllm" else kind
    for i, spelling in enumerate(lacking):
        assert f"is not a {label} flag in any build" in errors[i], (spelling, errors[i])


def test_a_vllm_service_refuses_llama_cpp_flags(tmp_path: Path) -> None:
    errors = _errors(_validate(tmp_path, "vllm", "0.19.2rc1", ["--n-cpu-moe", "3"]))
    assert list(errors) == [0]  # the value goes with its flag: one error
    assert "'--n-cpu-moe' is not a vLLM flag in any build layoutgen read" in errors[0]


@pytest.mark.parametrize(
    ("kind", "version", "args", "says"),
    [
        (
            "ik_llama.cpp",
            "4300",
            ["-wgt", "8"],
            "-wgt is not in ik_llama.cpp 4300 (builds 4378 on)",
        ),
        ("ik_llama.cpp", "3900", ["-no-fa"], "-no-fa is not in ik_llama.cpp 3900 (builds 3928 on)"),
        (
            "llama.cpp",
            "9802",
            ["--load-mode", "none"],
            "--load-mode is not in llama.cpp 9802 (read in builds 10502-11434 (not in 10001))",
        ),
        (
            "llama.cpp",
            "11434",
            ["--direct-io"],
            "--direct-io is not in llama.cpp 11434 (read in builds 9093-10502 (gone by 11003))",
        ),
        (
            "vllm",
            "0.33.0",
            ["--swap-space", "4"],
            "--swap-space is not in vLLM 0.33.0 (read in builds 0.8.0-0.17.0 (gone by 0.20.0))",
        ),
        (
            "vllm",
            "0.11.0",
            ["--default-chat-template-kwargs", "{}"],
            "not in vLLM 0.11.0 (read in builds 0.15.0-0.33.0 (not in 0.13.0))",
        ),
    ],
)
def test_a_flag_the_build_lacks_names_the_builds_that_have_it(
    tmp_path: Path, kind: str, version: str, args: list[str], says: str
) -> None:
    errors = _errors(_validate(tmp_path, kind, version, args))
    assert list(errors) == [0], errors  # its value is not a stray argument
    assert says in errors[0]


@pytest.mark.parametrize("kind", RUNTIMES)
def test_every_memory_flag_the_plan_does_not_model_is_refused(tmp_path: Path, kind: str) -> None:
    """Every spelling of UNMODELLED (VLLM_UNMODELLED) the newest build takes, with its
    values: each refused with its reason, at its own index."""
    rows = flags.table(kind).rows
    reasons = flags.VLLM_UNMODELLED if kind == "vllm" else flags.UNMODELLED
    present = sorted(
        s for s in reasons if s in rows and rows[s][1][-1].until is None and s not in _owned(kind)
    )
    args: list[str] = []
    index = {}
    for s in present:
        index[len(args)] = s
        args += _value(kind, s)
    errors = _errors(_validate(tmp_path, kind, NEWEST[kind], args))
    assert sorted(errors) == sorted(index), (set(index) ^ set(errors), errors)
    for i, s in index.items():
        assert reasons[s].split(";")[0][:40] in errors[i], (s, errors[i])
    must = {"-sm", "--spec-type", "-nkvo", "--override-kv"} | (
        {"-ser"} if kind == "ik_llama.cpp" else set()
    )
    if kind != "vllm":
        assert must <= set(present)


def test_the_issues_examples_are_refused(tmp_path: Path) -> None:
    """Issue 30's list: -sm graph on ik (the argv would end '-sm layer ... -sm graph'),
    --spec-type draft-mtp, a flag no build has."""
    cases = {
        ("-sm", "graph"): "-sm graph changes memory or placement the plan does not model",
        ("--spec-type", "draft-mtp"): "--spec-type draft-mtp changes memory or placement",
        ("--no-such-flag",): "'--no-such-flag' is not a ik_llama.cpp flag in any build",
    }
    for args, says in cases.items():
        errors = _errors(_validate(tmp_path, "ik_llama.cpp", "4840", list(args)))
        assert list(errors) == [0] and says in errors[0], errors


@pytest.mark.parametrize(
    ("kind", "typo", "meant"),
    [
        ("llama.cpp", "--jinjja", "--jinja"),
        ("llama.cpp", "--flash-atn", "--flash-attn"),
        ("ik_llama.cpp", "--merge-qvk", "--merge-qkv"),
        ("ik_llama.cpp", "--attention-max-bach", "--attention-max-batch"),
        ("vllm", "--max-model-length", "--max-model-len"),
        ("vllm", "--enable-prefix-cache", "--enable-prefix-caching"),
    ],
)
def test_a_typo_gets_did_you_mean(tmp_path: Path, kind: str, typo: str, meant: str) -> None:
    errors = _errors(_validate(tmp_path, kind, NEWEST[kind], [typo]))
    assert list(errors) == [0]
    assert f"did you mean {meant!r}" in errors[0] or f"{meant!r}" in errors[0], errors[0]


def test_a_value_is_a_value_whatever_it_looks_like(tmp_path: Path) -> None:
    """--alias -x: the runtime reads '-x' as the alias; a word no flag reads is refused."""
    assert _errors(_validate(tmp_path, "ik_llama.cpp", "4840", ["--alias", "-x"])) == {}
    assert _errors(_validate(tmp_path, "llama.cpp", "11434", ["--temp", "-1"])) == {}
    errors = _errors(_validate(tmp_path, "llama.cpp", "11434", ["--temp", "0.7", "stray"]))
    assert list(errors) == [2] and "'stray' is not a flag" in errors[2]
    errors = _errors(_validate(tmp_path, "llama.cpp", "11434", ["--jinja", "--alias"]))
    assert list(errors) == [1] and "--alias reads 1 value and args end" in errors[1]
    errors = _errors(_validate(tmp_path, "llama.cpp", "11434", ["--temp=0.7"]))
    assert "write '--temp', '0.7'" in errors[0]
    # vLLM's argparse takes '=' and underscores
    ok = ["--max_num_batched_tokens=4096"]
    assert "not a vLLM flag" not in str(_errors(_validate(tmp_path, "vllm", "0.33.0", ok)))


def test_fa_as_each_build_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-fa bare before ik 3928, gone 3928-3984, -fa on|off|auto from 3985 (llama.cpp:
    a value in every build read), checked at ERROR (flags.FA_FORM)."""
    monkeypatch.setattr(flags, "FA_FORM", Severity.ERROR)
    ik = "ik_llama.cpp"
    errors = _errors(_validate(tmp_path, ik, "3900", ["-fa", "on"]))
    assert list(errors) == [1] and "-fa reads none in ik_llama.cpp 3900" in errors[1]
    errors = _errors(_validate(tmp_path, ik, "3950", ["-fa"]))
    assert "-fa is not in ik_llama.cpp 3950 (builds 2771-3927; builds 3985 on)" in errors[0]
    errors = _errors(_validate(tmp_path, ik, "4840", ["--jinja", "-fa"]))
    assert list(errors) == [1] and "-fa reads 1 value and args end" in errors[1]
    # no version: the form written says which builds (3985 on for a value, 2771-3927
    # bare: layoutgen.solve.builds plans those), and flags no one build reads together
    # are refused, each with its builds
    assert _errors(_validate(tmp_path, ik, None, ["-fa", "on"])) == {}
    assert _errors(_validate(tmp_path, ik, None, ["-fa", "--jinja"])) == {}
    diags = _validate(tmp_path, ik, None, ["-fa", "-no-fmoe"])
    parting = [d.message for d in diags if d.severity is Severity.ERROR]
    assert len(parting) == 1, parting
    assert "no ik_llama.cpp build reads all these flags as written" in parting[0]
    assert "-fa as written: builds 2771-3927" in parting[0]
    assert "-no-fmoe as written: builds 3928 on" in parting[0]
    assert "runtimes.<id>.version" in parting[0]
    errors = _errors(_validate(tmp_path, "llama.cpp", "11434", ["-fa", "--jinja"]))
    assert "reads '-fa' with a value, on, off or auto" in errors[0]
    # the form each build reads passes
    for build in ("3900", "3950", "3985", "4840"):
        for on in (True, False):
            form = flags.flash_attn_args(ik, int(build), on)
            if form is None:  # 3928-3984 off: -no-fa, which the plan does not read
                assert (build, on) == ("3950", False)
                continue
            diags = _validate(tmp_path, ik, build, form)
            assert not [d for d in diags if "args" in d.message and d.severity is Severity.ERROR]


def test_flash_attention_default_by_build() -> None:
    """ik_llama.cpp: off before 3928 (common.h flash_attn = false), on since."""
    assert flags.flash_attn_default("ik_llama.cpp", 3927) is False
    assert flags.flash_attn_default("ik_llama.cpp", 3928) is True
    assert flags.flash_attn_default("ik_llama.cpp", None) is None
    assert flags.flash_attn_default("llama.cpp", 11434) is True
    assert flags.flash_attn_args("ik_llama.cpp", None, True) is None


def test_an_undated_flag_is_a_warning_not_an_error(tmp_path: Path) -> None:
    """llama.cpp's sampled builds: --agent was read first in 9802 (not in 9415): 9600
    may or may not have it; 6000 is older than every build read: one warning."""
    diags = _validate(tmp_path, "llama.cpp", "9600", ["--agent"])
    assert _errors(diags) == {}
    assert any("whether llama.cpp 9600 has --agent is not known" in d.message for d in diags)
    diags = _validate(tmp_path, "llama.cpp", "b6000", ["--jinja", "--alias", "x"])
    assert _errors(diags) == {}
    older = [d for d in diags if "older than the oldest build" in d.message]
    assert len(older) == 1 and "--jinja, --alias" in older[0].message


def test_with_no_version_a_flag_some_build_has_passes(tmp_path: Path) -> None:
    assert _errors(_validate(tmp_path, "ik_llama.cpp", None, ["-wgt", "8", "--jinja"])) == {}
    diags = _validate(tmp_path, "llama.cpp", None, ["--tts-use-guide-tokens"])
    assert _errors(diags) == {}
    assert any(
        "--tts-use-guide-tokens is not in the newest llama.cpp builds (read in builds "
        "9093-10001 (gone by 10502))" in d.message
        for d in diags
    )


def test_every_class_list_names_flags_the_parsers_have() -> None:
    """A spelling in MODELLED/UNMODELLED that no table holds is a typo in the lists."""
    llama = set(flags.table("llama.cpp").rows) | set(flags.table("ik_llama.cpp").rows)
    assert sorted(set(flags.MODELLED) - llama) == []
    assert sorted(set(flags.UNMODELLED) - llama) == []
    assert sorted(flags.EXITS - llama) == []
    assert sorted(set(flags.VLLM_UNMODELLED) - set(flags.table("vllm").rows) - {"-O"}) == []


def test_vllm_values_are_read_as_argparse_reads_them(tmp_path: Path) -> None:
    """Values up to the next option (a negative number is a value), '=' and '-O3'."""
    args = ["--seed", "-1", "--allowed-origins", "a", "b", "--trust-remote-code"]
    assert _errors(_validate(tmp_path, "vllm", "0.19.2rc1", args)) == {}
    errors = _errors(_validate(tmp_path, "vllm", "0.19.2rc1", ["--seed"]))
    assert "--seed reads a value in every vLLM release read" in errors[0]
    errors = _errors(_validate(tmp_path, "vllm", "0.19.2rc1", ["-O3"]))
    assert "'-O3' changes the CUDA graphs the plan budgets" in errors[0]
    errors = _errors(_validate(tmp_path, "vllm", "0.19.2rc1", ["--compilation-config.level", "3"]))
    assert "--compilation-config.level changes the CUDA graphs" in errors[0]


def test_a_bare_fa_on_a_build_that_reads_no_value_is_planned_on(tmp_path: Path) -> None:
    """ik before 3928 reads a bare -fa as on (its default was off): the plan reads it
    the same way, so a CPU-only service is sized with flash attention and its argv
    keeps the bare -fa (no '-fa off' of layoutgen's after it)."""
    from layoutgen.spec.roles import flash_attn

    text = _spec("ik_llama.cpp", "3900", ["--jinja", "-fa"])
    text = text.replace("    gpus: [gpu0]\n", "    gpus: []\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    v = validate_file(path)
    (rs,) = [r for r in v.services if not r.gpus]
    assert flash_attn(rs, v.spec.runtimes[rs.service.runtime].rules()) is True
    argv = v.plan.service(rs.name).argv
    assert argv.count("-fa") == 1 and "off" not in argv


@pytest.mark.parametrize(
    ("kind", "version", "args", "says"),
    [
        ("llama.cpp", "11434", ["--ctx_size", "8192"], "'--ctx_size' is --ctx-size to llama.cpp"),
        ("ik_llama.cpp", "4840", ["--n_gpu_layers", "99"], "is --n-gpu-layers to ik_llama.cpp"),
        ("vllm", "0.19.2rc1", ["--max_num_seqs", "8"], "is --max-num-seqs to vLLM"),
        ("vllm", "0.19.2rc1", ["--gpu-memory", "0.9"], "is --gpu-memory-utilization to vLLM"),
        ("vllm", "0.19.2rc1", ["--speculative-config.method", "mtp"], "use 'speculative:'"),
        ("vllm", "0.19.2rc1", ["--max-num", "8"], "is the start of several vLLM options"),
    ],
)
def test_an_owned_flag_in_another_spelling_is_refused(
    tmp_path: Path, kind: str, version: str, args: list[str], says: str
) -> None:
    """Both parsers read '_' as '-' in a '--' name; vLLM's argparse takes a unique start
    of a name and a dotted field: none of them smuggles a flag layoutgen decides."""
    errors = _errors(_validate(tmp_path, kind, version, args))
    assert list(errors) == [0], errors
    assert says in errors[0]


@pytest.mark.parametrize("spelling", ["--version", "--list-devices", "-h"])
def test_a_flag_that_makes_the_server_exit_is_refused(tmp_path: Path, spelling: str) -> None:
    errors = _errors(_validate(tmp_path, "llama.cpp", "11434", [spelling]))
    assert "makes llama-server print and exit" in errors[0]


def test_llama_cpp_fa_before_every_build_read_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's -fa took no value before about build 6327, older than the oldest
    sdist read (9093): a bare -fa at build 5269 passes (with the one 'older than'
    warning); with no version it passes too (some build reads it: planned for every
    build, llama.cpp's table dating none exactly)."""
    diags = _validate(tmp_path, "llama.cpp", "b5269", ["--jinja", "-fa"])
    assert _errors(diags) == {}
    monkeypatch.setattr(flags, "FA_FORM", Severity.ERROR)
    assert _errors(_validate(tmp_path, "llama.cpp", None, ["-fa"])) == {}


def test_ik_logging_options_are_read_from_log_h(tmp_path: Path) -> None:
    """ik's parser hands --log-file, --log-disable, ... to common/log.h."""
    args = ["--log-disable", "--log-file", "/tmp/x", "--log-append"]
    assert _errors(_validate(tmp_path, "ik_llama.cpp", "4357", args)) == {}
