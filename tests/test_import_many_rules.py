"""20,000 ``-ot`` rules (issue 31): every one comes back, in order, as YAML that reads
back the same strings.  The tensor_overrides block is written without ruamel's
emitter (which made import take seconds); its scalars are checked here."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from layoutgen.importer import import_text
from layoutgen.importer.tospec import _scalar


def test_twenty_thousand_rules_come_back_in_order() -> None:
    rules = [(f"blk\\.{i % 78}\\.ffn_(up|gate)_exps", f"CUDA{i % 2}") for i in range(20_000)]
    text = "llama-server -m /m/a.gguf -c 8 -ngl 99 " + " ".join(f"-ot '{p}={b}'" for p, b in rules)
    doc = YAML(typ="safe").load(import_text(text).yaml)
    got = doc["services"]["a"]["tensor_overrides"]
    assert [(o["pattern"], o["device"]) for o in got] == [
        (p, "gpu0" if b == "CUDA0" else "gpu1") for p, b in rules
    ]


@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40))
def test_a_flow_scalar_reads_back_the_same_string(text: str) -> None:
    (value,) = YAML(typ="safe").load(f"- {{pattern: {_scalar(text)}, device: x}}\n")
    assert value["pattern"] == text


def test_patterns_are_plain_where_they_can_be() -> None:
    assert _scalar("blk\\.(3|4)\\.ffn_.*") == "blk\\.(3|4)\\.ffn_.*"
    assert _scalar("exps") == "exps"
    for typed in ("3", "true", "null", "no", "-1", ".inf", "a: b", "x,y", "#c", ""):
        assert _scalar(typed).startswith('"'), typed
