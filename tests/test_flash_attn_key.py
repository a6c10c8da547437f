"""'flash_attn:' (issue 30): flash attention said once, rendered in the build's form.

ik_llama.cpp read a bare -fa until build 3927 (off by default), had it on by default
with -no-fa to turn it off from 3928 to 3984, and reads -fa on|off since 3985
(common.cpp at each build; layoutgen.spec.flags' table).  Before 3928 no flag said
off, and layoutgen renders -fa on with GPUs when args say nothing: the key is how a
spec says off there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layoutgen.errors import InvalidInput
from layoutgen.render.validate import validate_file

from specs import VALID, write

ROOT = Path(__file__).resolve().parent.parent


def _argv(tmp: Path, version: str, key: str) -> tuple[str, ...]:
    text = VALID.replace('version: "4840"', f'version: "{version}"')
    text = text.replace("ik_llama.cpp:4840", f"ik_llama.cpp:{version}")
    text = text.replace("    threads: 15\n", f"    threads: 15\n{key}", 1)
    plan = validate_file(write(tmp, text)).plan
    return next(s for s in plan.services if s.name == "grandpa").argv


@pytest.mark.parametrize(
    ("version", "on", "off"),
    [
        ("3900", ["-fa"], []),
        ("3950", [], ["-no-fa"]),
        ("4840", ["-fa", "on"], ["-fa", "off"]),
    ],
)
def test_the_key_renders_the_builds_own_form(
    tmp_path: Path, version: str, on: list[str], off: list[str]
) -> None:
    def fa(argv: tuple[str, ...]) -> list[str]:
        out = []
        for i, a in enumerate(argv):
            if a in ("-fa", "-no-fa"):
                out.append(a)
                if i + 1 < len(argv) and argv[i + 1] in ("on", "off"):
                    out.append(argv[i + 1])
        return out

    assert fa(_argv(tmp_path, version, "    flash_attn: true\n")) == on
    assert fa(_argv(tmp_path, version, "    flash_attn: false\n")) == off
    # without the key a GPU service gets flash attention on (the default)
    assert fa(_argv(tmp_path, version, "")) == on


def test_off_changes_what_the_plan_sizes(tmp_path: Path) -> None:
    """Without flash attention the KQ matrix is materialised: more compute."""
    text = VALID.replace("    threads: 15\n", "    threads: 15\n    flash_attn: false\n", 1)
    off = validate_file(write(tmp_path, text, "off.yaml")).plan
    on = validate_file(write(tmp_path, VALID, "on.yaml")).plan

    def compute(plan: object) -> int:
        sp = next(s for s in plan.services if s.name == "grandpa")  # type: ignore[attr-defined]
        return sum(p.compute for b, p in sp.buffers.items() if b.startswith("CUDA"))

    assert compute(off) > compute(on)


def test_the_key_beside_a_written_fa_is_refused_where_written(tmp_path: Path) -> None:
    text = VALID.replace(
        "    threads: 15\n", '    threads: 15\n    flash_attn: false\n    args: [-fa, "on"]\n', 1
    )
    with pytest.raises(InvalidInput) as err:
        validate_file(write(tmp_path, text))
    said = str(err.value)
    assert re.search(r"spec\.yaml:\d+:\d+: error: services\.grandpa\.args\[0\]: -fa beside", said)
    assert "keep one of the two" in said


def test_vllm_refuses_the_key(tmp_path: Path) -> None:
    text = (ROOT / "layouts" / "vllm-tower-seed004.yaml").read_text()
    text = text.replace("profile: models/", f"profile: {ROOT}/layouts/models/")
    head, services = text.split("\nservices:\n", 1)
    services = services.replace("  genesis:\n", "  genesis:\n    flash_attn: true\n", 1)
    name = "genesis"
    with pytest.raises(InvalidInput) as err:
        validate_file(write(tmp_path, head + "\nservices:\n" + services))
    assert f"services.{name}.flash_attn: vLLM picks its attention backend" in str(err.value)
