"""A tensor-parallel vLLM service is planned with NVLink's NCCL buffers unless the spec
shows its GPUs have no NVLink (issue 35): where that is only because nothing says so,
validate warns and says how to free the difference."""

from __future__ import annotations

from pathlib import Path

from layoutgen.render.validate import validate_file

from specs import write

ROOT = Path(__file__).resolve().parent.parent
# aeon at 52K: planned with NVLink's buffers its 122,880 tokens do not fit
SEED004 = (
    (ROOT / "layouts" / "vllm-tower-seed004.yaml")
    .read_text()
    .replace("profile: models/", f"profile: {ROOT}/layouts/models/")
    .replace("ctx: 122880", "ctx: 53248")
)


def _notes(tmp: Path, text: str) -> list[str]:
    found = validate_file(write(tmp, text))
    return [w.message for w in found.warnings if "NVLink's NCCL buffers" in w.message]


def test_named_cards_without_nvlink_plan_pcie_silently(tmp_path: Path) -> None:
    assert "GeForce RTX 5060 Ti" in SEED004
    assert _notes(tmp_path, SEED004) == []


def test_unnamed_gpus_are_planned_as_nvlink_with_a_warning(tmp_path: Path) -> None:
    text = SEED004.replace("name: NVIDIA GeForce RTX 5060 Ti", "# name removed")
    notes = _notes(tmp_path, text)
    assert len(notes) == 2, notes  # genesis and aeon, each tensor parallel 2
    assert all("no 'name:' in host.gpus" in n and "NCCL_P2P_DISABLE=1" in n for n in notes)
    # what naming them frees, per GPU: 1.79 GiB - 0.30 GiB
    assert all("1,526 MiB a GPU goes to the KV cache" in n for n in notes), notes
    # and the plan is the larger one: less KV room than with the names
    named = validate_file(write(tmp_path, SEED004, "named.yaml")).plan
    unnamed = validate_file(write(tmp_path, text, "unnamed.yaml")).plan
    assert unnamed.device("gpu0").used > named.device("gpu0").used


def test_p2p_disabled_in_env_says_pcie(tmp_path: Path) -> None:
    text = SEED004.replace("name: NVIDIA GeForce RTX 5060 Ti", "# name removed")
    text = text.replace(
        'env: {VLLM_MARLIN_USE_ATOMIC_ADD: "1"}',
        'env: {VLLM_MARLIN_USE_ATOMIC_ADD: "1", NCCL_P2P_DISABLE: "1"}',
    )
    assert _notes(tmp_path, text) == []
