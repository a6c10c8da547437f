"""``import --spec``: CDI devices and CUDA_VISIBLE_DEVICES named by the spec's GPUs.

Issue 30: ``--device nvidia.com/gpu=1`` became ``gpu0`` with ``--spec`` (the
first id of the spec, whatever the index), and ``nvidia.com/gpu=all`` one GPU
of a two-GPU spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from layoutgen.errors import LayoutgenError
from layoutgen.importer import SpecGpu, import_text

DATA = Path(__file__).parent / "import"
LAYOUTS = Path(__file__).parent.parent / "layouts"
UUID0 = "GPU-8b4e1f2a-0000-4000-8000-000000000000"
UUID1 = "GPU-93c7d5e1-1111-4111-8111-111111111111"
#: the spec's GPUs listed out of index order, ids unlike "gpu<index>"
SPEC = [SpecGpu("right", 1, UUID1), SpecGpu("left", 0, UUID0)]


def service(text: str, gpus: list[SpecGpu] | None = SPEC) -> dict[str, Any]:
    doc = YAML(typ="safe").load(import_text(text, "cmd.sh", gpus=gpus).yaml)
    (svc,) = doc["services"].values()
    return dict(svc)


def podman(devices: str, args: str = "-ngl 99") -> str:
    return f"podman run {devices} img:1 -m /m/a.gguf -c 8 {args}"


def test_a_cdi_index_is_the_spec_gpu_with_that_index() -> None:
    assert service(podman("--device nvidia.com/gpu=1"))["gpus"] == ["right"]
    assert service(podman("--device nvidia.com/gpu=0"))["gpus"] == ["left"]
    assert service(podman("--device nvidia.com/gpu=1"), None)["gpus"] == ["gpu1"]


def test_a_cdi_uuid_is_the_spec_gpu_with_that_uuid() -> None:
    assert service(podman(f"--device nvidia.com/gpu={UUID1.lower()}"))["gpus"] == ["right"]


def test_all_is_every_gpu_of_the_spec_in_index_order() -> None:
    svc = service(podman("--device nvidia.com/gpu=all", "-ngl 99 -ot exps=CUDA1"))
    assert svc["gpus"] == ["left", "right"]
    assert svc["tensor_overrides"] == [{"pattern": "exps", "device": "right"}]


def test_cuda_numbers_cdi_devices_in_index_order() -> None:
    """Inside the container CUDA0 is the lower host index, whatever order podman got them."""
    text = podman("--device nvidia.com/gpu=1 --device nvidia.com/gpu=0", "-ngl 99 -ot a=CUDA0")
    svc = service(text)
    assert svc["gpus"] == ["left", "right"]
    assert svc["tensor_overrides"] == [{"pattern": "a", "device": "left"}]


def test_cuda_visible_devices_numbers_in_its_own_order() -> None:
    svc = service("CUDA_VISIBLE_DEVICES=1,0 llama-server -m /m/a.gguf -ngl 99 -ot a=CUDA0")
    assert svc["gpus"] == ["right", "left"]
    assert svc["tensor_overrides"] == [{"pattern": "a", "device": "right"}]


def test_a_native_server_sees_every_gpu_of_the_spec() -> None:
    assert service("llama-server -m /m/a.gguf -ngl 99")["gpus"] == ["left", "right"]


def test_a_gpu_the_spec_lacks_is_an_error_naming_the_spec_gpus() -> None:
    with pytest.raises(LayoutgenError) as info:
        import_text(podman("--device nvidia.com/gpu=3"), "cmd.sh", gpus=SPEC)
    assert str(info.value) == (
        "cmd.sh:1:21: error: the command runs on the GPU with index 3, which the spec's "
        f"host.gpus does not have (its GPUs: left (index 0, uuid {UUID0}), right (index 1, "
        f"uuid {UUID1})); add it to host.gpus (layoutgen probe prints them) or import with "
        "the spec of the host this command ran on"
    )
    with pytest.raises(LayoutgenError, match="with UUID GPU-ffff"):
        import_text(podman("--device nvidia.com/gpu=GPU-ffff"), "cmd.sh", gpus=SPEC)


def test_cli_spec_maps_the_seed_device(tmp_path: Path) -> None:
    from conftest import run_cli

    seed = DATA / "seed001-glm51-base-cpu-moe.podman"  # --device nvidia.com/gpu=1
    result = run_cli(["import", str(seed), "--spec", str(LAYOUTS / "familiar-final.yaml")])
    assert result.code == 0, result.stderr
    (svc,) = YAML(typ="safe").load(result.stdout)["services"].values()
    assert svc["gpus"] == ["gpu1"]
    unit = DATA / "seed001-glm51-quadlet.container"  # AddDevice=nvidia.com/gpu=1
    bad = tmp_path / "one-gpu.yaml"
    text = (LAYOUTS / "familiar-final.yaml").read_text()
    bad.write_text(text.replace("index: 1", "index: 7"))
    result = run_cli(["import", str(unit), "--spec", str(bad)])
    assert result.code == 1
    assert result.stderr.startswith(
        f"{unit}:8:11: error: the command runs on the GPU with index 1, which the spec's "
        "host.gpus does not have (its GPUs: gpu0 (index 0), gpu1 (index 7))"
    )


def test_docker_gpus_forms() -> None:
    assert service(podman("--gpus all"))["gpus"] == ["left", "right"]
    assert service(podman("--gpus 1"))["gpus"] == ["left"]  # a count: the first GPU
    assert service(podman("--gpus '\"device=1\"'"))["gpus"] == ["right"]


def test_rpc_devices_come_first_and_are_named_by_endpoint() -> None:
    spec = [*SPEC, SpecGpu("far", None, None, "10.0.0.2:50052")]
    svc = service(
        "CUDA_VISIBLE_DEVICES=0 llama-server -m /m/a.gguf -c 8 --rpc 10.0.0.2:50052 -ngl 99 "
        "-ts 3,1 "
        "-ot 'blk\\.1\\.=RPC0[10.0.0.2:50052]'",
        spec,
    )
    assert svc["gpus"] == ["far", "left"]  # llama.cpp's order: rpc devices, then local
    assert svc["tensor_split"] == {"far": 3, "left": 1}
    assert svc["tensor_overrides"] == [{"pattern": "blk\\.1\\.", "device": "far"}]
    with pytest.raises(LayoutgenError, match="no rpc device at that endpoint"):
        import_text("llama-server -m /m/a.gguf --rpc 10.9.9.9:1 -ngl 9", "cmd.sh", gpus=spec)
