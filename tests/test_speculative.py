"""Speculative decoding on vLLM (issue 17 item 5, seed 004: MTP n=3).

``speculative: {method: mtp, num_tokens: N}`` renders
``--speculative-config '{"method":"mtp","num_speculative_tokens":N}'`` (the
field names of vLLM 0.11.0's ``SpeculativeConfig``).  Its memory: the MTP
layers' weights are already in the profile's bytes; their KV joins the
cache (one more attention layer per token); the sampler scores N + 1 rows a
sequence and the proposer keeps its own buffers (estimated).  A draft model
is refused: 0.11.0's V1 engine has no draft-model proposer.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_vllm_plan import CHAT, HOST, PROFILE

from layoutgen.errors import InvalidInput
from layoutgen.render.validate import Validated, validate_file
from layoutgen.runtimes.vllm import memory as vm

#: the tiny Llama with one MTP layer after its 4 decoder layers (blk.4)
MTP_PROFILE = (
    PROFILE.replace("n_layer: 4", "n_layer: 5\n  nextn_layers: 1")
    .replace("{0..3}", "{0..4}")
    .replace("4 layers)", "4 layers + 1 MTP layer)")
)
MTP = CHAT + "    speculative: {method: mtp, num_tokens: 3}\n"


def validated(tmp_path: Path, services: str, profile: str = MTP_PROFILE) -> Validated:
    (tmp_path / "tiny.yaml").write_text(profile)
    path = tmp_path / "spec.yaml"
    coder = Path(__file__).resolve().parent.parent / "layouts/models/qwen3-coder-next-q4_0.yaml"
    path.write_text(HOST % {"coder": coder, "version": "0.11.0"} + services)
    return validate_file(path, "spec.yaml")


def errors(tmp_path: Path, services: str, profile: str = MTP_PROFILE) -> list[str]:
    try:
        validated(tmp_path, services, profile)
    except InvalidInput as exc:
        return [d.gcc() for d in exc.diagnostics if d.severity.name == "ERROR"]
    raise AssertionError("accepted")


def test_mtp_flag(tmp_path: Path) -> None:
    argv = list(validated(tmp_path, MTP).plan.service("chat").argv)
    value = argv[argv.index("--speculative-config") + 1]
    assert json.loads(value) == {"method": "mtp", "num_speculative_tokens": 3}
    assert value == '{"method":"mtp","num_speculative_tokens":3}'


def test_mtp_adds_its_layers_kv_and_the_proposers_buffers(tmp_path: Path) -> None:
    plain = validated(tmp_path, CHAT).plan.service("chat").budget
    b = validated(tmp_path, MTP).plan.service("chat").budget
    assert plain is not None and b is not None
    # weights: the MTP layer's tensors are in the profile either way
    assert b.term("weights") == plain.term("weights")
    # KV: 4 + 1 attention layers x 8 KV heads x 128 x (K, V) x 2 bytes a token
    assert plain.kv_bytes_per_token == 4 * 8 * 128 * 2 * 2
    assert b.kv_bytes_per_token == 5 * 8 * 128 * 2 * 2
    assert b.term("kv") == 2 * 32768 * b.kv_bytes_per_token + 16 * b.kv_bytes_per_token
    # activation: the sampler's rows grow from 2 to 2 x (3 + 1) = 8; the proposer keeps
    # input_ids (int32), positions (int64), hidden_states and inputs_embeds (bf16) for
    # max_num_batched_tokens rows (eagle.py:89-110 of 0.11.0)
    tokens, hidden, vocab = 2048, 4096, 128256
    proposer = tokens * (4 + 8 + 2 * hidden * 2)
    sampler = 8 * vocab * vm.SAMPLER_BYTES_PER_LOGIT + tokens * hidden * 2
    forward = plain.term("activation") / vm.ACTIVATION_MARGIN
    expected = int(max(forward, sampler) * vm.ACTIVATION_MARGIN) + proposer
    assert abs(b.term("activation") - expected) <= 1


def test_mtp_without_mtp_layers_is_refused(tmp_path: Path) -> None:
    (error,) = errors(tmp_path, MTP, PROFILE)
    assert "services.chat.speculative.method: model 'tiny' has no MTP layers" in error


def test_draft_models_are_refused_with_the_reason(tmp_path: Path) -> None:
    (error,) = errors(
        tmp_path, CHAT + "    speculative: {method: draft, num_tokens: 4, model: tiny}\n"
    )
    assert "services.chat.speculative.method: vLLM's V1 engine has no draft-model proposer" in error


def test_speculative_on_llama_cpp_is_refused(tmp_path: Path) -> None:
    from test_vllm_plan import CODER

    (error,) = errors(tmp_path, CODER + "    speculative: {method: mtp, num_tokens: 2}\n")
    assert "services.coder.speculative: llama.cpp has no speculative (a vllm setting)" in error


def test_speculative_config_in_args_is_refused(tmp_path: Path) -> None:
    (error,) = errors(tmp_path, CHAT + "    args: ['--speculative-config', '{}']\n")
    assert "--speculative-config is decided by layoutgen; use 'speculative:'" in error
