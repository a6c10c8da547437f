"""out/<host>/endpoints.json (issue 18 item 5): what a client needs, from spec and plan."""

from __future__ import annotations

import json
from pathlib import Path

from layoutgen.render.artifacts import render
from layoutgen.render.outdir import _looks_generated
from layoutgen.render.validate import validate_file

from conftest import ROOT
from specs import VALID, write

FINAL = ROOT / "layouts" / "familiar-final.yaml"


def _endpoints(path: Path, name: str = "spec.yaml") -> dict:
    v = validate_file(path, name)
    files = render(v, name)
    text = files[f"{v.spec.host.name}/endpoints.json"]
    assert files == render(validate_file(path, name), name)  # byte-identical again
    return json.loads(text)


def test_each_service_answers_where_its_unit_listens() -> None:
    doc = _endpoints(FINAL, "layouts/familiar-final.yaml")
    assert doc["schema"] == 1 and doc["spec"] == "layouts/familiar-final.yaml"
    text = FINAL.read_text()
    grandpa = doc["services"]["grandpa"]
    assert grandpa["base_url"] == "http://127.0.0.1:8000/v1"
    assert grandpa["health"] == "http://127.0.0.1:8000/health"
    assert grandpa["exposed"] is False and grandpa["unit"] == "grandpa.service"
    # the API key's place, as the spec names it; never a key
    assert grandpa["api_key"] == {"secret": "grandpa-api-key"}
    assert "secret: grandpa-api-key" in text
    # the name /v1/models reports: the alias the spec passes (-a GLM-5.1)
    assert grandpa["model"] == "GLM-5.1" and "GLM-5.1" in text
    worker = doc["services"]["naughty-worker0"]
    # ctx 262144 over 2 slots: llama-server gives each request ctx / slots
    assert (worker["ctx_per_request"], worker["slots"]) == (131072, 2)
    assert doc["start_order"] == ["naughty-worker0", "naughty-worker1", "grandpa"]


def test_without_an_alias_the_model_is_the_path_the_server_was_given(tmp_path: Path) -> None:
    doc = _endpoints(write(tmp_path, VALID))
    worker = doc["services"]["worker0"]
    assert worker["model"].startswith("/models/coder/") and worker["model"].endswith(".gguf")
    assert worker["api_key"] is None and worker["conflicts"] == []


def test_ctx_0_is_the_trained_context(tmp_path: Path) -> None:
    text = VALID.replace("    ctx: 262144\n", "    ctx: 0\n")
    assert "ctx: 0" in text
    v = validate_file(write(tmp_path, text), "spec.yaml")
    trained = v.profiles["coder"].hparams.n_ctx_train
    assert trained
    doc = _endpoints(write(tmp_path, text))
    worker = doc["services"]["worker0"]
    assert worker["ctx_per_request"] == trained // worker["slots"]


def test_the_output_directory_knows_it_as_generated() -> None:
    doc = _endpoints(FINAL, "layouts/familiar-final.yaml")
    assert _looks_generated("compute/endpoints.json", json.dumps(doc))


def test_a_vllm_request_gets_the_whole_max_model_len(tmp_path: Path) -> None:
    import test_vllm_plan as vllm

    v = vllm.plan(tmp_path, vllm.CHAT)
    doc = json.loads(render(v, "spec.yaml")["box/endpoints.json"])
    chat = doc["services"]["chat"]
    assert chat["runtime"] == "vllm" and chat["ctx_per_request"] == 32768  # --max-model-len
    assert chat["model"] == "/models/tiny/checkpoint"
