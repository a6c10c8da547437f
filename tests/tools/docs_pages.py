"""The parts of docs/ that are data: generated from the code, never copied by hand.

    python -m tests.tools.docs_pages            rewrite them
    python -m tests.tools.docs_pages --check    exit 1 naming each stale page

(``make docs-pages`` runs it and the truth table's ``--docs``; ``tests/test_docs_pages.py``
fails when a page is not what this prints.)  What is generated:

- ``docs/index.md``: README.md, its ``docs/`` links made relative to the site;
- ``docs/changelog.md``: CHANGELOG.md;
- between ``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->`` in a page:
  ``spec-keys`` (every key of the spec, its type and its description, from the
  pydantic schema), ``cli-help`` (each command's ``--help``), ``rules-ik`` and
  ``rules-llama`` (each runtime's dated rules), ``flag-tables`` (the builds each
  runtime's flag table was read from), ``input-limits`` (the bounds on
  what layoutgen reads, from the constants that enforce them), ``speed-lomo`` (the
  speed model's leave-one-machine-out table over tests/speed_data), ``truth-holdout``
  (the truth table's figures on the held-out logs).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def index_page() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/", "](", text)
    text = text.replace("](CHANGELOG.md)", "](changelog.md)")
    return "<!-- generated from README.md by tests/tools/docs_pages.py: edit README.md -->\n" + text


def changelog_page() -> str:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return "<!-- generated from CHANGELOG.md by tests/tools/docs_pages.py -->\n" + text


# --- spec keys ---------------------------------------------------------------------------


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[1]
    if "anyOf" in prop:
        return " | ".join(_type(p) for p in prop["anyOf"])
    if "oneOf" in prop:
        return " | ".join(_type(p) for p in prop["oneOf"])
    if "enum" in prop:
        return " | ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    t = prop.get("type", "any")
    if t == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if t == "object" and "additionalProperties" in prop:
        extra = prop["additionalProperties"]
        return f"map of {_type(extra) if isinstance(extra, dict) else 'any'}"
    return str(t)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def spec_keys() -> str:
    from layoutgen.spec.schema import json_schema

    schema = json_schema()
    defs = schema.get("$defs", {})
    out = []
    sections: list[tuple[str, dict[str, Any]]] = [("(top level)", schema)]
    sections += sorted(defs.items())
    for name, d in sections:
        props = d.get("properties")
        if not props:
            continue
        required = set(d.get("required", ()))
        out.append(f"### {name}\n")
        if d.get("description") and name != "(top level)":
            out.append(_cell(d["description"]) + "\n")
        out.append("| key | type | required | meaning |")
        out.append("|---|---|---|---|")
        for key, prop in props.items():
            out.append(
                f"| `{key}` | {_cell(_type(prop))} | {'yes' if key in required else ''} | "
                f"{_cell(prop.get('description', ''))} |"
            )
        out.append("")
    return "\n".join(out)


# --- the CLI -----------------------------------------------------------------------------


def cli_help() -> str:
    from typer.testing import CliRunner

    from layoutgen.cli import app

    runner = CliRunner()
    main = runner.invoke(app, ["--help"], env={"COLUMNS": "100", "TERM": "dumb"}, terminal_width=78)
    names = re.findall(r"^  ([a-z][a-z-]*)\s", main.stdout.split("Commands:", 1)[1], re.M)
    out = ["```text", "$ layoutgen --help", main.stdout.rstrip(), "```", ""]
    for name in names:
        r = runner.invoke(
            app, [name, "--help"], env={"COLUMNS": "100", "TERM": "dumb"}, terminal_width=78
        )
        out += [f"### layoutgen {name}", "", "```text", f"$ layoutgen {name} --help"]
        out += [r.stdout.rstrip(), "```", ""]
    return "\n".join(out)


# --- runtime rules and flag tables -------------------------------------------------------


def _module(*names: str) -> Any:
    """The first of ``names`` that imports (modules move between layers; issue 32)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(names[0])


def _rules(module: str) -> str:
    rules = sorted(_module(module).RULES, key=lambda r: (r.since_build, r.name))
    out = ["| build | merged | rule | since then | source |", "|---|---|---|---|---|"]
    for r in rules:
        out.append(
            f"| {r.since_build} | {r.since.isoformat()} | `{r.name}` | {_cell(r.summary)} | "
            f"{_cell(r.source)} |"
        )
    return "\n".join(out) + "\n"


def rules_ik() -> str:
    return _rules("layoutgen.runtimes.ik_llama_cpp")


def rules_llama() -> str:
    return _rules("layoutgen.runtimes.llama_cpp")


def flag_tables() -> str:
    tables = [
        ("llama.cpp", ("layoutgen.runtimes.llama_cpp.flag_table",)),
        ("ik_llama.cpp", ("layoutgen.runtimes.ik_llama_cpp.flag_table",)),
        ("vLLM", ("layoutgen.runtimes.vllm.flag_table", "layoutgen.runtimes.vllm_flag_table")),
    ]
    out = ["| runtime | builds read | spellings | module |", "|---|---|---|---|"]
    for runtime, names in tables:
        m = _module(*names)
        samples = getattr(m, "SAMPLES", None)
        if samples:
            builds = ", ".join(str(s) for s in samples) + " (sampled)"
        else:
            builds = f"every build up to {m.NEWEST} (exact)"
        out.append(f"| {runtime} | {builds} | {len(m.FLAGS)} | `{m.__name__}` |")
    return "\n".join(out) + "\n"


# --- input limits ------------------------------------------------------------------------


def _bytes(n: int) -> str:
    for unit, size in (("PiB", 1 << 50), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} bytes"


def _count(n: int) -> str:
    return f"2^{n.bit_length()} - 1" if n > 1 << 40 and (n + 1) & n == 0 else f"{n:,}"


#: (what is bounded, module candidates, constant, how to show it)
LIMITS: tuple[tuple[str, tuple[str, ...], str, Callable[[int], str]], ...] = (
    (
        "a spec file",
        ("layoutgen.inputs.yamlbounds", "layoutgen.spec.yamlbounds"),
        "MAX_SPEC_BYTES",
        _bytes,
    ),
    (
        "a model profile file",
        ("layoutgen.inputs.yamlbounds", "layoutgen.spec.yamlbounds"),
        "MAX_PROFILE_BYTES",
        _bytes,
    ),
    (
        "values in one YAML file",
        ("layoutgen.inputs.yamlbounds", "layoutgen.spec.yamlbounds"),
        "MAX_NODES",
        _count,
    ),
    (
        "YAML nesting depth",
        ("layoutgen.inputs.yamlbounds", "layoutgen.spec.yamlbounds"),
        "MAX_DEPTH",
        _count,
    ),
    (
        "values aliases copy, in all",
        ("layoutgen.inputs.yamlbounds", "layoutgen.spec.yamlbounds"),
        "MAX_ALIAS_NODES",
        _count,
    ),
    ("an integer", ("layoutgen.inputs.yamlbounds", "layoutgen.spec.yamlbounds"), "MAX_INT", _count),
    ("a size", ("layoutgen.inputs.sizes", "layoutgen.spec.sizes"), "MAX_SIZE", _bytes),
    (
        "a string in a spec (characters)",
        ("layoutgen.inputs.literals", "layoutgen.spec.literals"),
        "MAX_TEXT",
        _count,
    ),
    (
        "a path (characters)",
        ("layoutgen.inputs.literals", "layoutgen.spec.literals"),
        "MAX_PATH",
        _count,
    ),
    (
        "a `tensor_overrides` pattern, counts written out (characters)",
        ("layoutgen.inputs.patterns", "layoutgen.spec.patterns"),
        "MAX_POSITIONS",
        _count,
    ),
    (
        "groups nested in a pattern",
        ("layoutgen.inputs.patterns", "layoutgen.spec.patterns"),
        "MAX_DEPTH",
        _count,
    ),
    (
        "a count `{m,n}` in a pattern",
        ("layoutgen.inputs.patterns", "layoutgen.spec.patterns"),
        "MAX_COUNT",
        _count,
    ),
    ("a layer number in a spec", ("layoutgen.spec.schema",), "MAX_LAYER", _count),
    ("a context in tokens", ("layoutgen.spec.schema",), "MAX_TOKENS", _count),
    ("threads", ("layoutgen.spec.schema",), "MAX_THREADS", _count),
    ("layers of a model profile", ("layoutgen.models.profile",), "MAX_LAYERS", _count),
    ("tensors of a model profile (unfolded)", ("layoutgen.models.profile",), "MAX_TENSORS", _count),
    (
        "a safetensors header (bytes)",
        ("layoutgen.models.safetensors_header",),
        "MAX_HEADER",
        _count,
    ),
    (
        "dimensions of a safetensors tensor",
        ("layoutgen.models.safetensors_header",),
        "MAX_DIMS",
        _count,
    ),
)


def input_limits() -> str:
    out = ["| what | at most | constant |", "|---|---|---|"]
    for what, modules, name, show in LIMITS:
        m = _module(*modules)
        out.append(f"| {what} | {show(getattr(m, name))} | `{m.__name__}.{name}` |")
    return "\n".join(out) + "\n"


# --- the speed model's leave-one-machine-out table ---------------------------------------


def speed_lomo() -> str:
    """``python -m layoutgen.speed.lomo --markdown``, the public results in tests/speed_data."""
    lomo = _module("layoutgen.speed.lomo")
    return str(lomo.markdown(tuple(ROOT / f for f in lomo.FOLDERS)))


def truth_holdout() -> str:
    """``python -m tests.truth.table --holdout``: the held-out logs' figures."""
    from tests.truth.holdout_report import report

    return "\n" + report().strip() + "\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "spec-keys": spec_keys,
    "cli-help": cli_help,
    "rules-ik": rules_ik,
    "rules-llama": rules_llama,
    "flag-tables": flag_tables,
    "input-limits": input_limits,
    "speed-lomo": speed_lomo,
    "truth-holdout": truth_holdout,
}
MARK = re.compile(r"(<!-- generated:([a-z-]+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.S)


def fill(text: str, made: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in made:
            made[name] = SECTIONS[name]()
        return f"{m.group(1)}{made[name].rstrip()}\n{m.group(4)}"

    return MARK.sub(sub, text)


def pages() -> dict[Path, str]:
    """Every generated page or section, as it should read: {path: text}."""
    want = {DOCS / "index.md": index_page(), DOCS / "changelog.md": changelog_page()}
    made: dict[str, str] = {}
    for page in sorted(DOCS.rglob("*.md")):
        if page in want:
            continue
        text = page.read_text(encoding="utf-8")
        filled = fill(text, made)
        if filled != text:
            want[page] = filled
    unused = set(SECTIONS) - set(made)
    if unused:
        raise SystemExit(f"no page holds the generated sections {sorted(unused)}")
    return want


def stale() -> list[Path]:
    return [
        p for p, text in pages().items() if not p.is_file() or p.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        old = stale()
        for p in old:
            print(f"{p.relative_to(ROOT)}: not what tests/tools/docs_pages.py generates")
        return 1 if old else 0
    for p, text in pages().items():
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
