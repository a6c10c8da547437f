"""Quoting: what the shell (a real /bin/sh) and systemd read back is the argv we meant."""

from __future__ import annotations

import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from layoutgen.render.quoting import shell, shell_line, systemd

NASTY = [
    r"^blk\.([3-8]|21|40)\.ffn_(up|gate|down|gate_up)_exps\.weight$=CUDA0",
    "two words",
    "it's",
    'say "hi"',
    "100%",
    "$HOME",
    "back\\slash",
    "",
    "tab\there",
    "new\nline",
    "--chat-template-kwargs",
    '{"enable_thinking": false}',
]

ARGS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=20,
)


def _sh_argv(line: str) -> list[str]:
    out = subprocess.run(
        ["/bin/sh", "-c", "printf '%s\\0' " + line], capture_output=True, check=True
    ).stdout
    return out.decode().split("\0")[:-1]


def test_shell_quoting_survives_a_real_shell() -> None:
    assert _sh_argv(shell_line(NASTY)) == NASTY


@settings(max_examples=200, deadline=None)
@given(st.lists(ARGS, min_size=1, max_size=5))
def test_shell_quoting_round_trips(argv: list[str]) -> None:
    assert _sh_argv(shell_line(argv)) == argv


def test_safe_words_stay_bare() -> None:
    assert shell("--ctx-size") == "--ctx-size"
    assert shell("/models/glm/x.gguf") == "/models/glm/x.gguf"
    assert systemd("--port") == "--port"
    assert systemd("8000") == "8000"


def test_systemd_escapes_specifiers_variables_and_backslashes() -> None:
    assert systemd("100%") == '"100%%"'
    assert systemd("$HOME") == '"$$HOME"'
    assert systemd(r"blk\.3") == r'"blk\\.3"'
    assert systemd('say "hi"') == r'"say \"hi\""'
    assert systemd("") == '""'
