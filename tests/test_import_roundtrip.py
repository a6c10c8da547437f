"""``import`` round trip: real command line -> spec -> plan -> argv, same placement.

Each data file under tests/import/ taken from a public start-up log names
its truth record (tests/truth/records); the record's printed hyperparameters
give the model's tensors (tests/truth/synth.py).  The imported service is
planned on a host with room to spare, and then both command lines are read
the way llama.cpp reads them (-ot rules by regex search in order, first match
wins, then --cpu-moe / --n-cpu-moe; tests/test_argv.py's reader): every
tensor must go to the same buffer, and -ngl and -ts must mean the same.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from test_argv import _rules

from layoutgen.core.override import apply
from layoutgen.errors import InvalidInput
from layoutgen.importer import import_text
from layoutgen.importer.cmdline import read_command
from layoutgen.importer.tospec import FLAGS, MAPPED
from layoutgen.models.profile import dump_profile, load_profile
from layoutgen.render.validate import validate_file
from tests.truth import synth, table

DATA = Path(__file__).parent / "import"
RECORD = re.compile(r"\((tests/truth/records/[^)]+\.yaml)\)")
ROOT = Path(__file__).resolve().parent.parent

#: data files that cannot round-trip, and why (said, never skipped silently)
CANNOT = {
    "i756-kimik2-numactl-4gpu-ot-spaces.sh": "matches none of the",
    "seed001-glm51-2gpu-ot-args-loop.podman": "holds the shell variable '$OT_ARGS'",
    "pr616-kimik2-arith-subst.sh": "holds the shell command substitution",
    "seed003-glm51-64k-launch.podman": "holds the shell variable '$OT_ARGS'",
}


#: seed 001's model, profiled from its GGUF headers (layouts/models)
GLM_51 = ROOT / "layouts" / "models" / "glm-5.1-iq3_ks.yaml"


def _files() -> list[tuple[Path, Path]]:
    """Each data file with what describes its model: a truth record, or seed 001's
    GLM-5.1 profile for the seed command lines that run it."""
    out = []
    for path in sorted(DATA.iterdir()):
        text = path.read_text(encoding="utf-8")
        m = RECORD.search(text.split("\n", 1)[0])
        if m and "constructed" not in text.split("\n", 1)[0]:
            out.append((path, ROOT / m.group(1)))
        elif path.name.startswith("seed") and "GLM-5.1-IQ3_KS" in text:
            out.append((path, GLM_51))
    return out


FILES = _files()


def test_enough_real_command_lines_round_trip() -> None:
    assert len([p for p, _ in FILES if p.name not in CANNOT]) >= 15


def _words(text: str) -> list[str]:
    """The original command's words, split by shlex on its own (not the importer's)."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return shlex.split(re.sub(r"\$\(\((\d+)\)\)", r"\1", body.replace("\\\n", " ")))


def _normal(words: list[str]) -> list[str]:
    """Long and ``=`` spellings and comma-separated -ot values as tests/test_argv.py
    reads them: ``-ot RULE`` each, ``--cpu-moe``, ``--n-cpu-moe N``."""
    out: list[str] = []
    it = iter(words)
    for w in it:
        flag, eq, value = w.partition("=") if w.startswith("--") else (w, "", "")
        if flag in ("-ot", "--override-tensor"):
            for rule in (value if eq else next(it, "")).split(","):
                out += ["-ot", rule]
        elif flag in ("-cmoe", "--cpu-moe"):
            out.append("--cpu-moe")
        elif flag in ("-ncmoe", "--n-cpu-moe"):
            out += ["--n-cpu-moe", value if eq else next(it, "0")]
    return out


def _meanings(words: list[str]) -> set[str]:
    """The flags of a command line by what they set (``-c`` and ``--ctx-size`` alike)."""
    out = set()
    for w in words:
        name = w.split("=", 1)[0] if w.startswith("--") else w
        if w.startswith("-") and not re.fullmatch(r"-\d[\d.]*", w):
            info = FLAGS.get(name)
            out.add(info.meaning if info is not None and info.meaning in MAPPED else name)
    return out


#: what render writes in its own way, whatever the command said: the model path, the
#: address it binds, and placement, which the tensor comparison below checks
RENDERED_ANYWAY = {"model", "host", "port", "override", "cpu_moe", "n_cpu_moe", "ngl"}


def _unlisted(words: list[str], argv: list[str], yaml: str) -> set[str]:
    """Flags the rendered argv has that the command did not, and import did not list."""
    listed = [line.split(":", 1)[0] for line in yaml.splitlines() if line.startswith("#   adds ")]
    said = _meanings([w for line in listed for w in line.split()])
    return _meanings(argv) - _meanings(words) - said - RENDERED_ANYWAY


#: what the rendered argv says another way: -mg is gpus: (-sm none) or nothing (a layer
#: split), -sm layer is the default split, --mlock may be -lm mlock
SAID_OTHERWISE = {"main_gpu", "split_mode", "mlock", "load_mode", "-lm", "--load-mode"}


def _lost(words: list[str], argv: list[str], imported: Any) -> set[str]:
    """Flags of the command the rendered argv lacks, that import did not say it dropped."""
    said = " ".join(w.message for w in imported.warnings)
    lost = _meanings(words) - _meanings(argv) - SAID_OTHERWISE
    return {m for m in lost if m not in said and not any(f in said for f in _spellings(m))}


def _spellings(meaning: str) -> list[str]:
    return [n for n, info in FLAGS.items() if info.meaning == meaning] or [meaning]


def _reading(argv: list[str], names: list[str]) -> dict[str, str | None]:
    return apply(_rules(tuple(_normal(argv))), names)


@pytest.mark.parametrize(("path", "record_path"), FILES, ids=[p.name for p, _ in FILES])
def test_import_plan_argv_places_every_tensor_as_the_command(
    path: Path, record_path: Path, tmp_path: Path
) -> None:
    why = CANNOT.get(path.name, "")
    text = path.read_text(encoding="utf-8")
    if "holds the shell" in why:  # from text, import refuses what the shell would expand
        with pytest.raises(InvalidInput, match=re.escape(why)):
            import_text(text, path.name)
        return
    imported = import_text(text, path.name)
    build: str | None = "4357"  # seed 001's ik_llama.cpp build (its -fa syntax)
    if record_path == GLM_51:
        profile = load_profile(GLM_51)
    else:
        record = table.load(record_path)
        build = table.version(record)
        if "tensor table" in why or "prints no" in why:
            with pytest.raises(synth.NotExpressible, match=why.split(": ")[-1]):
                synth.profile(record)
            return
        profile = synth.profile(record)
    yaml = YAML(typ="safe")
    doc: dict[str, Any] = yaml.load(imported.yaml)
    (svc,) = doc["services"].values()
    gpus = list(svc.get("gpus") or [])
    (model,) = doc["models"].values()
    (profile_path := tmp_path / "m.yaml").write_text(dump_profile(profile), encoding="utf-8")
    model.update(path="/models/m.gguf", profile=str(profile_path))
    (runtime,) = doc["runtimes"].values()
    runtime.pop("binary", None)
    runtime.pop("version", None)
    if build is not None:  # the build the command ran: its flags' syntax
        runtime["version"] = build
    runtime["image"] = "registry.example/llama:pinned"
    doc["host"] = {
        "name": "t",
        "cpu": {"cores": 64, "threads": 128},
        "ram": "4TiB",
        "ram_reserve": "1GiB",
        "podman": "5.4",
        "gpus": [
            {"id": g, "index": i, "vram": "1TiB", "reserve": "0MiB"} for i, g in enumerate(gpus)
        ],
    }
    # settings that change no placement and that a spec refuses as written
    svc["args"] = [a for a in svc.get("args", []) if a not in ("-sm", "graph", "row")]
    spec = tmp_path / "spec.yaml"
    with spec.open("w", encoding="utf-8") as fh:
        YAML().dump(doc, fh)
    if why:  # refused by the spec, with the reason the table gives
        with pytest.raises(InvalidInput, match=why):
            validate_file(spec)
        return
    v = validate_file(spec)
    (sp,) = v.plan.services

    words = _words(text)
    assert _unlisted(words, list(sp.argv), imported.yaml) == set(), path.name
    server_words = [w.text for w in read_command(text, path.name).args]
    assert _lost(server_words, list(sp.argv), imported) == set(), path.name

    names = [t.name for t in profile.tensors()]
    before = _reading(words, names)
    after = _reading(list(sp.argv), names)
    assert after == before, path.name
    if "-ts" in words and len(gpus) > 1:
        value = words[len(words) - words[::-1].index("-ts")]  # the last -ts counts
        want = [float(x) for x in re.split(r"[,/]", value) if x]
        got = [float(x) for x in sp.argv[sp.argv.index("-ts") + 1].split(",")]
        assert got[: len(want)] == want
