"""vLLM services rendered beside llama.cpp ones, checked by the real tools.

podman 5.4's quadlet generator must accept every unit of a host where a vLLM
service shares a GPU with a llama.cpp service, and the ExecStart it generates
must run exactly the planned ``vllm serve`` arguments after the image (the
image's entrypoint supplies ``vllm serve``); ``systemd-analyze verify`` must
accept the plain units; the API key reaches vLLM as ``VLLM_API_KEY`` from a
podman secret and never as an argument; start order is health-gated.
"""

from __future__ import annotations

from pathlib import Path

from test_vllm_plan import CHAT, CODER, PROFILE, spec_text

from layoutgen.render.artifacts import render
from layoutgen.render.validate import Validated, validate_file

from realtools import quadlet_dryrun, systemd_argv, systemd_verify, unit_values

IMAGE = "docker.io/vllm/vllm-openai:v0.11.0"
KEYED = CHAT + (
    "    api_key: {secret: chat-key}\n"
    "    env: {VLLM_MARLIN_USE_ATOMIC_ADD: '1'}\n"
    "    served_model_name: tiny\n"
    "    kv_cache_dtype: fp8\n"
)


def rendered(tmp_path: Path, services: str = KEYED + CODER) -> tuple[Validated, dict[str, str]]:
    (tmp_path / "tiny.yaml").write_text(PROFILE)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(services))
    v = validate_file(path, "spec.yaml")
    return v, render(v, "spec.yaml")


def test_quadlet_accepts_vllm_beside_llama_cpp(tmp_path: Path) -> None:
    v, files = rendered(tmp_path)
    units = tmp_path / "units"
    units.mkdir()
    for path, text in files.items():
        if path.endswith(".container"):
            (units / Path(path).name).write_text(text)
    assert sorted(p.name for p in units.iterdir()) == ["chat.container", "coder.container"]
    result = quadlet_dryrun(units)
    assert result.ok, (result.rc, result.warnings)
    chat = v.plan.service("chat")
    argv = systemd_argv(result.exec_start("chat.service"))
    assert argv[argv.index(IMAGE) + 1 :] == list(chat.argv[2:])
    assert chat.argv[:2] == ("vllm", "serve")
    assert "--secret" in argv and "chat-key,type=env,target=VLLM_API_KEY" in argv
    assert "--shm-size" in argv and argv[argv.index("--shm-size") + 1] == "2g"
    generated = tmp_path / "generated"
    generated.mkdir()
    for name in ("chat", "coder"):
        text = result.stdout.split(f"---{name}.service---\n", 1)[1].split("\n---", 1)[0]
        (generated / f"{name}.service").write_text(text + "\n")
    rc, stderr = systemd_verify(sorted(generated.glob("*.service")))
    assert rc == 0 and stderr == "", stderr
    # health-gated start order: coder waits for chat on the GPU they share
    coder = result.units["coder.service"]
    assert "chat.service" in " ".join(unit_values(coder, "Unit", "After"))
    assert "chat.service" in " ".join(unit_values(coder, "Unit", "Wants"))


def test_plain_systemd_units_verify_and_run_the_planned_argv(tmp_path: Path) -> None:
    v, files = rendered(tmp_path)
    out = tmp_path / "systemd"
    out.mkdir()
    for path, text in files.items():
        if "/systemd/" in path:
            (out / Path(path).name).write_text(text)
    rc, stderr = systemd_verify(sorted(out.glob("*.service")))
    assert rc == 0 and stderr == "", stderr
    text = (out / "chat.service").read_text()
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    argv = systemd_argv(line.removeprefix("ExecStart="))
    assert argv[:2] == ["/usr/bin/podman", "run"]
    assert argv[argv.index(IMAGE) + 1 :] == list(v.plan.service("chat").argv[2:])
    assert "ExecStartPost=/bin/sh -c " in text and "/usr/bin/curl" in text  # readiness wait


def test_vllm_flags_and_no_secret_in_argv(tmp_path: Path) -> None:
    v, files = rendered(tmp_path)
    argv = list(v.plan.service("chat").argv)
    for flag, value in [
        ("--model", "/models/tiny/checkpoint"),
        ("--host", "0.0.0.0"),  # inside the container; published on 127.0.0.1
        ("--port", "8000"),
        ("--max-num-batched-tokens", "2048"),
        ("--tensor-parallel-size", "1"),
        ("--kv-cache-dtype", "fp8"),
        ("--served-model-name", "tiny"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert "--api-key" not in argv and "--enforce-eager" not in argv
    container = files["box/quadlet/chat.container"]
    assert "PublishPort=127.0.0.1:8000:8000" in container
    assert "Environment=VLLM_MARLIN_USE_ATOMIC_ADD=1" in container
    assert "Secret=chat-key,type=env,target=VLLM_API_KEY" in container
    assert "HealthCmd=curl -fsS http://127.0.0.1:8000/health" in container
    assert "AddDevice=nvidia.com/gpu=0" in container
    assert "Volume=/srv/models/tiny:/models/tiny:ro,z" in container
    script = files["box/podman/chat.sh"]
    assert "--env VLLM_MARLIN_USE_ATOMIC_ADD=1" in script


def test_enforce_eager_drops_the_graphs(tmp_path: Path) -> None:
    v, _ = rendered(tmp_path, CHAT + "    enforce_eager: true\n")
    sp = v.plan.service("chat")
    assert "--enforce-eager" in sp.argv
    assert sp.budget is not None and sp.budget.term("cudagraph") == 0


def test_rendering_is_deterministic(tmp_path: Path) -> None:
    _, a = rendered(tmp_path)
    _, b = rendered(tmp_path)
    assert a == b
    assert "vLLM budget per GPU" in a["box/layout.md"]
