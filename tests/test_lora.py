"""LoRA adapters (issue 17 items 4 and 8): budgeted, rendered, updated daily, refused.

vLLM pre-allocates ``--max-loras`` slots at ``--max-lora-rank`` for every LoRA
layer when the model loads; the numbers here are derived by hand from vLLM
0.11.0's source, independently of ``vllm_memory``.  The daily update's
one-shot runs a bash program that this module executes for real against a
temporary directory with a fake ``curl`` on PATH.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from test_vllm_plan import CHAT, CODER, PROFILE, refused, spec_text

from layoutgen.errors import InvalidInput
from layoutgen.render.artifacts import render
from layoutgen.render.lora import UPDATE
from layoutgen.render.validate import Validated, validate_file

from realtools import quadlet_dryrun, shellcheck, systemd_argv, systemd_verify, unit_values

LORA = """\
    lora:
      max_loras: 2
      max_lora_rank: 32
      max_cpu_loras: 4
      adapters:
        - {name: mine, path: /srv/lora/mine}
        - name: daily
          path: /srv/lora/daily/current
          update: {dir: /srv/lora/daily/runs, at: "04:00"}
"""


def validated(tmp_path: Path, services: str) -> Validated:
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(services))
    return validate_file(path, "spec.yaml")


def test_lora_slots_are_budgeted_with_the_weights(tmp_path: Path) -> None:
    plain = validated(tmp_path, CHAT).plan.service("chat").budget
    v = validated(tmp_path, CHAT + LORA)
    sp = v.plan.service("chat")
    b = sp.budget
    assert b is not None and plain is not None
    # vLLM 0.11.0, fully_sharded_loras off, TP 1, bf16 (lora_dtype auto), n = max_loras 2,
    # r = max_lora_rank 32; per slice lora_a (n, 1, r, input) and lora_b (n, 1, out, r):
    # vllm/lora/layers/base_linear.py:62-80, column_parallel_linear.py:205-224
    n, r, h, q, kv, inter, d = 2, 32, 4096, 32 * 128, 8 * 128, 14336, 2
    qkv = 3 * r * h + (q + 2 * kv) * r  # MergedQKVParallelLinearWithLoRA: 3 slices
    o = r * q + h * r  # RowParallelLinearWithLoRA: input q, output hidden
    gate_up = 2 * r * h + 2 * inter * r  # MergedColumnParallelLinearWithLoRA: 2 slices
    down = r * inter + h * r
    layers = 4 * n * (qkv + o + gate_up + down) * d
    # LlamaForCausalLM lists embedding_modules (models/llama.py:493): embed_tokens
    # (vocal_parallel_embedding.py:50-76: extra-vocab embeddings 256 x h, A over vocab
    # + 256 rows, B h x r) and lm_head (logits_processor.py:91-116: A r x h, B over the
    # vocab padded to 256, 256 extra embeddings)
    vocab = 128256
    embed = n * (256 * h + (vocab + 256) * r + h * r) * d
    head = n * (r * h + vocab * r + 256 * h) * d  # 128256 is a multiple of 256
    assert b.term("lora") == layers + embed + head
    assert b.budget == plain.budget + b.term("lora")
    assert sp.buffers["CUDA0"].weights == b.term("weights") + b.term("lora")
    # the CPU cache: max_cpu_loras adapters at max_lora_rank, one slot each, host RAM
    cache = sp.buffers["CPU_LoRA_cache"]
    assert sp.device_of["CPU_LoRA_cache"] == "host"
    assert cache.weights == 4 * (layers + embed + head) // n
    assert cache.basis == {"weights": "upper-bound"}
    assert v.plan.device("host").used >= cache.weights


def test_lora_flags_and_mounts(tmp_path: Path) -> None:
    v = validated(tmp_path, CHAT + LORA)
    argv = list(v.plan.service("chat").argv)
    assert "--enable-lora" in argv
    for flag, value in [("--max-loras", "2"), ("--max-lora-rank", "32"), ("--max-cpu-loras", "4")]:
        assert argv[argv.index(flag) + 1] == value
    i = argv.index("--lora-modules")
    assert argv[i + 1 : i + 3] == ["mine=/adapters/mine", "daily=/adapters/daily"]
    files = render(v, "spec.yaml")
    container = files["box/quadlet/chat.container"]
    assert "Volume=/srv/lora/mine:/adapters/mine:ro,z" in container
    assert "Volume=/srv/lora/daily/current:/adapters/daily:ro,z" in container
    assert "Volume=/srv/lora/daily/runs:/adapter-updates/daily:ro,z" in container
    assert "Environment=VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in container
    assert "--env VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in files["box/podman/chat.sh"]


def test_no_update_no_runtime_endpoint(tmp_path: Path) -> None:
    one = LORA.split("        - name: daily")[0]
    files = render(validated(tmp_path, CHAT + one), "spec.yaml")
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in files["box/quadlet/chat.container"]
    assert not [p for p in files if "-lora-" in p]


def test_timer_and_oneshot_accepted_by_systemd(tmp_path: Path) -> None:
    v = validated(tmp_path, CHAT + "    api_key: {secret: chat-key}\n" + LORA)
    files = render(v, "spec.yaml")
    for target in ("quadlet", "systemd"):
        assert f"box/{target}/chat-lora-daily.timer" in files
        assert f"box/{target}/chat-lora-daily.service" in files
    assert "box/quadlet/chat-lora-mine.timer" not in files
    out = tmp_path / "units"
    out.mkdir()
    for path, text in files.items():
        if "/systemd/" in path:
            (out / Path(path).name).write_text(text)
    rc, stderr = systemd_verify(
        [out / "chat.service", out / "chat-lora-daily.service", out / "chat-lora-daily.timer"]
    )
    assert rc == 0 and stderr == "", stderr
    timer = files["box/systemd/chat-lora-daily.timer"]
    assert "OnCalendar=*-*-* 04:00:00" in timer and "WantedBy=timers.target" in timer
    # a night the host was off: the update runs at the next boot (systemd.timer Persistent=)
    assert "Persistent=true" in timer
    oneshot = files["box/systemd/chat-lora-daily.service"]
    assert "Type=oneshot" in oneshot and "Restart=no" in oneshot
    assert "Requisite=chat.service" in oneshot
    # the quadlet copy is the same plain unit, and the generator ignores it beside the
    # .container (quadlet has no timers)
    assert files["box/quadlet/chat-lora-daily.service"] == oneshot
    units = tmp_path / "quadlet"
    units.mkdir()
    for path, text in files.items():
        if "/quadlet/" in path:
            (units / Path(path).name).write_text(text)
    result = quadlet_dryrun(units)
    assert result.ok, (result.rc, result.warnings)
    assert unit_values(result.units["chat.service"], "Install", "WantedBy") == ["default.target"]
    # only the secret's name is rendered: the key itself is read when the update runs
    assert "podman secret inspect --showsecret" in UPDATE
    argv = systemd_argv(oneshot.split("ExecStart=", 1)[1].splitlines()[0], env={})
    assert argv[:2] == ["/bin/bash", "-c"] and argv[2] == UPDATE
    assert argv[3:] == [
        "lora-update", "daily", "/srv/lora/daily/runs", "/srv/lora/daily/current",
        "checkpoint", "32", "load", "8000", "chat.service", "/adapter-updates/daily",
        "/adapters/daily", "chat-key",
    ]  # fmt: skip


def test_update_program_passes_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "lora-update.sh"
    script.write_text("#!/bin/bash\n" + UPDATE)
    rc, out = shellcheck([script])
    assert rc == 0, out


# ---- the update program, run ------------------------------------------------------------

FAKE_CURL = """#!/bin/sh
# records each call: its arguments, one per line, and what it read on stdin
{ printf 'CALL\\n'; for a in "$@"; do printf '%s\\n' "$a"; done; } >> "$CURL_LOG"
case " $* " in *" -H @- "*) printf 'STDIN %s\\n' "$(cat)" >> "$CURL_LOG";; esac
exit "${CURL_RC:-0}"
"""
FAKE_PODMAN = """#!/bin/sh
printf 'sk-from-the-secret\\n'
"""


def _tree(tmp_path: Path, base: str, rank: int) -> tuple[Path, Path, Path]:
    runs = tmp_path / "runs"
    old, new = runs / "2026-05-01", runs / "2026-05-02"
    for d in (old, new):
        d.mkdir(parents=True)
    (old / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "r": 8}))
    config = {"base_model_name_or_path": base, "r": rank, "lora_alpha": 16}
    (new / "adapter_config.json").write_text(json.dumps(config, indent=2))
    os.utime(old, (1_000_000_000, 1_000_000_000))
    link = tmp_path / "current"
    link.symlink_to(old)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("curl", FAKE_CURL), ("podman", FAKE_PODMAN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return runs, link, bin_dir


def _run(
    tmp_path: Path, base: str, rank: int, secret: str = ""
) -> subprocess.CompletedProcess[str]:
    runs, link, bin_dir = _tree(tmp_path, base, rank)
    argv = [
        "/bin/bash", "-c", UPDATE, "lora-update", "daily", str(runs), str(link),
        "Qwen3-32B", "16", "load", "8000", "chat.service", "/adapter-updates/daily",
        "/adapters/daily", secret,
    ]  # fmt: skip
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CURL_LOG": str(tmp_path / "curl.log"),
    }
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def _calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "curl.log"
    if not log.exists():
        return []
    calls = log.read_text().split("CALL\n")[1:]
    return [c.splitlines() for c in calls]


def test_good_adapter_is_loaded(tmp_path: Path) -> None:
    done = _run(tmp_path, "Qwen/Qwen3-32B", 16)
    assert done.returncode == 0, done.stderr
    unload, load = _calls(tmp_path)
    assert unload[-1] == "http://127.0.0.1:8000/v1/unload_lora_adapter"
    assert load[-1] == "http://127.0.0.1:8000/v1/load_lora_adapter"
    body = json.loads(load[load.index("--data-binary") + 1])
    assert body == {"lora_name": "daily", "lora_path": "/adapter-updates/daily/2026-05-02"}
    assert "-H" in load and "@-" not in load  # no key: no header from stdin
    assert os.readlink(tmp_path / "current") == str(tmp_path / "runs" / "2026-05-02")
    assert "now serving" in done.stdout


def test_the_key_reaches_curl_on_stdin_only(tmp_path: Path) -> None:
    done = _run(tmp_path, "Qwen3-32B", 16, secret="chat-key")
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "curl.log").read_text()
    assert "STDIN Authorization: Bearer sk-from-the-secret" in log
    assert all("sk-from" not in a for call in _calls(tmp_path) for a in call if "STDIN" not in a)


@pytest.mark.parametrize(
    ("base", "rank", "message"),
    [
        ("meta-llama/Llama-3.1-8B", 16, "was trained on meta-llama/Llama-3.1-8B, not on Qwen3-32B"),
        ("Qwen/Qwen3-32B", 64, "has rank 64, above max_lora_rank 16"),
    ],
)
def test_a_failed_check_sends_nothing_and_names_the_adapter(
    tmp_path: Path, base: str, rank: int, message: str
) -> None:
    done = _run(tmp_path, base, rank)
    assert done.returncode == 1
    newest = tmp_path / "runs" / "2026-05-02"
    (line,) = done.stderr.splitlines()
    assert line == (
        f"lora update daily: adapter {newest} {message}; the running adapter is left in place"
    )
    assert _calls(tmp_path) == []
    assert os.readlink(tmp_path / "current") == str(tmp_path / "runs" / "2026-05-01")


def test_a_refused_load_puts_the_previous_adapter_back(tmp_path: Path) -> None:
    runs, link, bin_dir = _tree(tmp_path, "Qwen3-32B", 16)
    argv = [
        "/bin/bash", "-c", UPDATE, "lora-update", "daily", str(runs), str(link), "Qwen3-32B",
        "16", "load", "8000", "chat.service", "/adapter-updates/daily", "/adapters/daily", "",
    ]  # fmt: skip
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CURL_LOG": str(tmp_path / "curl.log")}
    done = subprocess.run(
        argv, env={**env, "CURL_RC": "22"}, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "vLLM refused to load adapter" in done.stderr
    calls = _calls(tmp_path)
    back = json.loads(calls[-1][calls[-1].index("--data-binary") + 1])
    assert back["lora_path"] == "/adapter-updates/daily/2026-05-01"
    assert os.readlink(link) == str(runs / "2026-05-01")


# ---- refused at validate time -------------------------------------------------------------


def test_rank_above_the_limit_is_refused(tmp_path: Path) -> None:
    (error,) = refused(
        tmp_path,
        CHAT + "    lora:\n      adapters: [{name: big, path: /srv/lora/big, rank: 64}]\n",
    )
    assert error.endswith(
        "error: services.chat.lora.adapters[0].rank: adapter 'big' has rank 64, above "
        "max_lora_rank 16, and vLLM refuses to load it; write max_lora_rank: 64 (under lora:) "
        "or train it at rank 16 or less"
    )


def test_adapter_of_another_base_model_is_refused(tmp_path: Path) -> None:
    (error,) = refused(
        tmp_path,
        CHAT
        + "    lora:\n      adapters:\n"
        + "        - {name: x, path: /srv/lora/x, base_model: meta-llama/Llama-3.1-8B}\n",
    )
    assert error.endswith(
        "error: services.chat.lora.adapters[0].base_model: adapter 'x' was trained on "
        "'meta-llama/Llama-3.1-8B', not on this service's model 'checkpoint'; serve it with "
        "that model, or set lora.base_model if both name the same"
    )


def test_same_base_by_last_component_is_accepted(tmp_path: Path) -> None:
    v = validated(
        tmp_path,
        CHAT
        + "    lora:\n      adapters:\n"
        + "        - {name: x, path: /srv/lora/x, base_model: org/checkpoint, rank: 8}\n",
    )
    assert "--enable-lora" in v.plan.service("chat").argv


def test_max_lora_rank_must_be_one_vllm_takes(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as exc:
        validated(
            tmp_path,
            CHAT
            + "    lora:\n      max_lora_rank: 24\n      adapters: [{name: x, path: /srv/x}]\n",
        )
    assert "vLLM accepts max_lora_rank 8, 16, 32, 64, 128, 256, 320, 512 only" in str(
        exc.value.diagnostics[0].gcc()
    )


def test_runtime_lora_env_is_layoutgens(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT + "    env: {VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True'}\n")
    assert "services.chat.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING: set by layoutgen" in error


def test_lora_flags_in_args_are_refused(tmp_path: Path) -> None:
    (error,) = refused(tmp_path, CHAT + "    args: [--enable-lora]\n")
    assert "services.chat.args[0]: --enable-lora is decided by layoutgen; use 'lora:'" in error


# ---- llama.cpp ------------------------------------------------------------------------------

LLAMA_LORA = """\
    lora:
      adapters:
        - {name: style, path: /srv/lora/style/style.gguf, size: 160MiB}
        - {name: tone, path: /srv/lora/tone/tone.gguf, size: 40MiB, scale: 0.5}
"""


def test_llama_cpp_adapters_flags_and_memory(tmp_path: Path) -> None:
    plain = validated(tmp_path, CODER).plan.service("coder")
    v = validated(tmp_path, CODER + LLAMA_LORA)
    sp = v.plan.service("coder")
    argv = list(sp.argv)
    i = argv.index("--lora")
    assert argv[i : i + 2] == ["--lora", "/adapters/style/style.gguf"]
    j = argv.index("--lora-scaled")
    assert argv[j : j + 3] == ["--lora-scaled", "/adapters/tone/tone.gguf", "0.5"]
    # each adapter tensor goes to its base tensor's buffer (llama-adapter.cpp); without
    # the tensor list every buffer holding layers is charged the whole adapters
    for buf in set(sp.layer_buffer.values()):
        extra = sp.buffers[buf].created - plain.buffers[buf].created
        assert extra == 200 << 20
        assert sp.buffers[buf].basis["created"] == "upper-bound"
    files = render(v, "spec.yaml")
    assert "Volume=/srv/lora/style:/adapters/style:ro,z" in files["box/quadlet/coder.container"]


def test_llama_cpp_adapter_size_from_its_header(tmp_path: Path) -> None:
    from gguf_fixtures import Spec, write_model

    plain = validated(tmp_path, CODER).plan.service("coder")
    folder = tmp_path / "lora"
    folder.mkdir()
    adapter = folder / "a.gguf"
    tensors = [Spec("blk.0.attn_q.weight.lora_a", (16, 4096), 0, 16 * 4096 * 4)]
    write_model(adapter, "llama", {}, tensors)
    v = validated(tmp_path, CODER + f"    lora:\n      adapters: [{{name: a, path: {adapter}}}]\n")
    sp = v.plan.service("coder")
    assert "--lora" in sp.argv
    buf = sorted(set(sp.layer_buffer.values()))[0]
    # the file's bytes after the header: the tensor data, padded to the alignment
    assert sp.buffers[buf].created - plain.buffers[buf].created == 16 * 4096 * 4


def test_llama_cpp_refuses_slots_and_updates(tmp_path: Path) -> None:
    errors = refused(
        tmp_path,
        CODER
        + "    lora:\n      max_loras: 2\n      adapters:\n"
        + "        - name: s\n          path: /srv/lora/s/s.gguf\n          size: 1MiB\n"
        + "          update: {dir: /srv/lora/runs, at: '04:00'}\n",
    )
    assert len(errors) == 2, errors
    assert "services.coder.lora.max_loras: llama.cpp loads every listed adapter whole" in errors[0]
    assert "services.coder.lora.adapters[0].update: update needs vLLM" in errors[1]


def test_unreadable_adapter_without_size_is_located(tmp_path: Path) -> None:
    (error,) = refused(
        tmp_path, CODER + "    lora:\n      adapters: [{name: s, path: /srv/nowhere/s.gguf}]\n"
    )
    assert "services.coder.lora.adapters[0].path: cannot read the adapter's GGUF header" in error
    assert "write its size under 'size:'" in error
