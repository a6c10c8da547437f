"""``import(render(spec))`` gives each example's services back (issue 30 item 4).

Every service of every example in layouts/ is rendered in memory; its podman
script is imported with the example's GPUs (``--spec``), the fragment is put
beside the example's host and model profiles, and planned again.  The keys
that map one to one must come back as the spec wrote them (or as the role
resolved them: the rendered argv pins every default), and the plan of the
imported service must put the same bytes in every runtime buffer: layoutgen's
own ``-ot`` rules come back as ``tensor_overrides`` that place each tensor
where the example's ``experts:`` did.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from layoutgen.importer import SpecGpu, import_text
from layoutgen.render.artifacts import render
from layoutgen.render.validate import Validated, validate_file

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))
#: keys a rendered argv carries one to one, compared with the resolved service, by runtime
KEYS = {
    "llama": ("ctx", "parallel", "cache_type_k", "cache_type_v", "batch", "ubatch", "threads",
              "threads_batch", "mlock", "port"),
    "vllm": ("ctx", "parallel", "batch", "kv_cache_dtype", "speculative", "env", "port"),
}  # fmt: skip
#: what the rendered script carries that import does not bring back (said, not skipped)
CANNOT = {
    "lora": "llama.cpp's LoRA adapters are rendered as --lora, which import keeps in args",
    "draft": "a draft model is rendered as -md, which import keeps in args",
    "schedule": "a schedule's start/stop units are not in the server's script",
}

_validated: dict[Path, Validated] = {}


def _validate(path: Path) -> Validated:
    if path not in _validated:
        _validated[path] = validate_file(path, str(path.relative_to(ROOT)))
    return _validated[path]


def _cases() -> list[tuple[Path, str]]:
    out = []
    for path in LAYOUTS:
        doc = YAML(typ="safe").load(path.read_text())
        out += [(path, name) for name in sorted(doc.get("services") or {})]
    return out


def _why_not(v: Validated, name: str) -> str | None:
    svc = v.spec.services[name]
    vllm = v.spec.runtimes[svc.runtime].kind == "vllm"
    for key in ("lora", "draft", "api_key", "schedule"):
        if getattr(svc, key, None) and not (key == "lora" and vllm):
            if key == "api_key":
                continue  # a secret or file: --api-key-file; env_file: EnvironmentFile=
            return CANNOT[key]
    return None


@pytest.mark.parametrize(("path", "name"), _cases(), ids=lambda c: getattr(c, "stem", c))
def test_import_of_the_rendered_script_gives_the_service_back(
    path: Path, name: str, tmp_path: Path
) -> None:
    spec_doc = YAML(typ="safe").load(path.read_text())
    v = _validate(path)
    why = _why_not(v, name)
    if why is not None:
        pytest.xfail(why)  # listed in CANNOT with its reason
    files = render(v, str(path.relative_to(ROOT)))
    # a container's podman script; a native server's systemd unit
    found = [
        f"{v.spec.host.name}/{k}/{name}.{e}" for k, e in (("podman", "sh"), ("systemd", "service"))
    ]
    script = next(f for f in found if f in files)
    gpus = [
        SpecGpu(g.id, g.index, g.uuid, g.rpc.endpoint if g.rpc is not None else None)
        for g in v.spec.host.gpus
    ]
    imported = import_text(files[script], Path(script).name, gpus=gpus, name=name)
    doc = YAML(typ="safe").load(imported.yaml)
    got = doc["services"][name]
    (rs,) = [s for s in v.services if s.name == name]
    assert sorted(got["gpus"]) == sorted(rs.gpus)  # in llama.cpp's device order
    kind = v.spec.runtimes[rs.service.runtime].kind
    for key in KEYS["vllm" if kind == "vllm" else "llama"]:
        written = getattr(rs, key, None)
        if written is None:
            written = getattr(rs.service, key, None)
        if key == "kv_cache_dtype" and written is None:
            written = "auto"  # vLLM's default, which render writes out
        if written in (None, {}, (), False) and key not in got:
            continue
        shown = written.model_dump(exclude_none=True) if hasattr(written, "model_dump") else written
        assert got.get(key) == shown, key
    assert [a for a in got.get("args", []) if a in rs.service.args] == list(rs.service.args)
    if rs.service.api_key is not None:
        assert got["api_key"] == rs.service.api_key.model_dump(exclude_none=True)

    # planned again beside the example's host and profiles: the same bytes in each buffer
    again = copy.deepcopy(spec_doc)
    (model,) = doc["models"].values()
    model_id = rs.service.model
    again["models"][model_id]["path"] = model["path"]
    for key in ("model", "runtime"):
        got[key] = spec_doc["services"][name][key]
    again["services"] = {name: got}
    again.pop("version", None)
    for key in list(again):
        if key not in ("version", "host", "models", "runtimes", "services"):
            again.pop(key)
    for other in ("conflicts", "default", "after", "priority"):
        got.pop(other, None)
    profiles = {m: spec_doc["models"][m]["profile"] for m in spec_doc["models"]}
    for m, profile in profiles.items():
        again["models"][m]["profile"] = str((path.parent / profile).resolve())
    spec = tmp_path / "again.yaml"
    with spec.open("w") as fh:
        YAML().dump(again, fh)
    (planned,) = validate_file(spec).plan.services
    (original,) = [s for s in v.plan.services if s.name == name]
    assert {b: p.weights for b, p in planned.buffers.items()} == {
        b: p.weights for b, p in original.buffers.items()
    }
