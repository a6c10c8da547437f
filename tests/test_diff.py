"""layoutgen diff between two revisions of a layout in a real git repository."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

SPEC = "layouts/final.yaml"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo with two commits of seed 001's final layout: experts moved, a ctx, a bind."""
    shutil.copytree(ROOT / "layouts" / "models", tmp_path / "layouts" / "models")
    text = (ROOT / "layouts" / "familiar-final.yaml").read_text()
    first = re.sub(
        r"experts:.*?max_layers: 20\n",
        "experts: {mode: explicit, layers: {gpu0: [3-8], gpu1: [72-77]}}\n",
        text,
        flags=re.S,
    )
    assert first != text
    (tmp_path / SPEC).write_text(first)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    second = first.replace("gpu0: [3-8]", "gpu0: [3-8, 20]").replace(
        "gpu1: [72-77]", "gpu1: [72-76]"
    )
    second = second.replace(
        "ctx: 262144                      # 128k x 2 slots\n    threads",
        "ctx: 131072\n    threads",
        1,
    )
    second = second.replace(
        "    port: 8002                       # assumed\n", "    port: 8002\n    expose: true\n"
    )
    (tmp_path / SPEC).write_text(second)
    _git(tmp_path, "commit", "-qam", "second")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_semantic_summary_line_by_line(repo: Path) -> None:
    result = run_cli(["diff", f"HEAD~1:{SPEC}", f"HEAD:{SPEC}"])
    assert result.code == 2, result.stderr
    summary = result.stdout.split("\n\n", 1)[0].splitlines()
    semantic = [
        line
        for line in summary
        if not re.match(r"^(gpu\d|host): used |^grandpa: decode [\d.]+ -> [\d.]+ tok/s", line)
    ]
    assert semantic == [
        "naughty-worker0: ctx 262144 -> 131072",
        "naughty-worker1: bind 127.0.0.1 -> 0.0.0.0 (leaves 127.0.0.1: reachable from the network)",
        "spec: services.grandpa.experts.layers.gpu0 [3-8] -> [3-8, 20]",
        "spec: services.grandpa.experts.layers.gpu1[0] 72-77 -> 72-76",
        "grandpa: gpu1 -> host, 3 tensors, 4,088 MiB: experts of blk.77",
        "grandpa: host -> gpu0, 3 tensors, 4,088 MiB: experts of blk.20",
        "check: the terms above sum to every device's change, to the byte",
        "new warning: services.naughty-worker1.expose: listens on 0.0.0.0 (all interfaces); "
        "llama.cpp servers have no authentication by default, keep this behind a firewall or "
        "remove 'expose'",
    ]
    devices = [line for line in summary if re.match(r"^(gpu\d|host): used ", line)]
    # gpu0 gains an expert layer (4088 MiB) and loses half of worker0's KV cache: both said
    assert devices[0] == (
        "gpu0: used 90,383 MiB -> 91,368 MiB (+985 MiB), free 6,352 MiB -> 5,367 MiB = grandpa "
        "tensors +4,088 MiB + naughty-worker0 kv -3,072 MiB + naughty-worker0 compute -31 MiB "
        "(estimated)"
    )
    # The file diffs follow: the published port moved to 0.0.0.0.
    assert "+PublishPort=0.0.0.0:8002:8002" in result.stdout
    assert "-PublishPort=127.0.0.1:8002:8002" in result.stdout


def test_json_form_and_no_change(repo: Path) -> None:
    result = run_cli(["diff", "--format", "json", f"HEAD~1:{SPEC}", SPEC])
    assert result.code == 2
    doc = json.loads(result.stdout)
    kinds = {c["kind"] for c in doc["changes"]}
    assert {"setting", "bind", "moved", "device", "check"} <= kinds
    moved = [c for c in doc["changes"] if c["kind"] == "moved"]
    assert {(tuple(c["layers"]), c["old"], c["new"]) for c in moved} == {
        ((20,), "host", "gpu0"),
        ((77,), "gpu1", "host"),
    }
    assert "compute/quadlet/naughty-worker1.container" in doc["files"]
    same = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert same.code == 0 and same.stdout == ""


def test_a_profile_change_alone_shows_its_consequences(repo: Path) -> None:
    profile = repo / "layouts" / "models" / "qwen3-coder-next-q4_0.yaml"
    text = profile.read_text()
    # Twice the context the model was trained for changes nothing; more KV heads do
    # (with their K and V projections twice as wide: a profile must be consistent)
    changed = text.replace("n_head_kv: 2", "n_head_kv: 4", 1)
    for proj in ("attn_k", "attn_v"):
        old = f'.{proj}.weight", type: "q4_0", shape: [2048, 512], bytes: 589824}}'
        assert old in changed
        changed = changed.replace(old, old.replace("512]", "1024]").replace("589824", "1179648"))
    assert changed != text
    profile.write_text(changed)
    _git(repo, "commit", "-qam", "profile")
    result = run_cli(["diff", f"HEAD~1:{SPEC}", f"HEAD:{SPEC}"])
    assert result.code == 2
    assert re.search(r"^gpu0: used [\d,]+ MiB -> [\d,]+ MiB \(\+", result.stdout, re.M)


def test_errors_exit_1(repo: Path) -> None:
    result = run_cli(["diff", f"HEAD~9:{SPEC}", SPEC])
    assert result.code == 1
    assert result.stderr.startswith(
        "error: git cat-file blob --end-of-options HEAD~9:layouts/final.yaml: fatal: "
    )


@pytest.mark.parametrize(
    "old",
    [
        f"--output=PWNED:{SPEC}",
        f"-oPWNED:{SPEC}",
        f"--textconv:{SPEC}",
    ],
)
def test_a_revision_that_looks_like_an_option_is_refused(repo: Path, old: str) -> None:
    """Issue 31: `diff -- '--output=PATH:spec' NEW` made git write PATH."""
    result = run_cli(["diff", "--", old, SPEC])
    assert result.code == 1
    assert result.stderr == (
        f"error: {old}: a revision cannot start with '-' (git would read it as an option); "
        "give REV:path, e.g. origin/main:layouts/x.yaml\n"
    )
    assert not list(repo.glob("PWNED*"))


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "..", "layouts/../.."])
def test_a_path_outside_the_repository_is_an_error_not_a_traceback(repo: Path, path: str) -> None:
    result = run_cli(["diff", f"HEAD:{path}", SPEC])
    assert result.code == 1
    assert result.stderr == (
        f"error: HEAD:{path}: {path} is outside the repository ({repo}); give REV:path "
        "with the path of a spec in the repository\n"
    )
    assert "root:" not in result.stdout + result.stderr


def test_a_profile_named_outside_the_repository_at_rev_is_not_read(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec at REV names a profile by a path leaving the repository: git is not
    asked for it, the working tree's file is not read, validate says why."""
    monkeypatch.delenv("LAYOUTGEN_ALLOW_OUTSIDE", raising=False)
    text = (repo / SPEC).read_text()
    hostile = re.sub(r"profile: \S+", "profile: ../../../../../../etc/passwd", text, count=1)
    (repo / SPEC).write_text(hostile)
    _git(repo, "commit", "-qam", "hostile")
    (repo / SPEC).write_text(text)
    result = run_cli(["diff", f"HEAD:{SPEC}", SPEC])
    assert result.code == 1
    assert "resolves outside" in result.stderr
    assert "root:" not in result.stdout + result.stderr


def test_gpus_added_removed_and_each_side_under_its_own_name(tmp_path: Path) -> None:
    """Issue 15 item 4: a GPU that goes away (seed 001's one-card layout on a host
    that lost its unused card) is reported in text and JSON, and each side's files
    keep their own spec's name."""
    from ruamel.yaml import YAML

    shutil.copytree(ROOT / "layouts" / "models", tmp_path / "models")
    old = tmp_path / "two-cards.yaml"
    old.write_text((ROOT / "layouts" / "glm51-3-cpu-moe-1gpu.yaml").read_text())
    yaml = YAML()
    doc = yaml.load(old.read_text())
    assert [g["id"] for g in doc["host"]["gpus"]] == ["gpu0", "gpu1"]
    del doc["host"]["gpus"][0]
    new = tmp_path / "one-card.yaml"
    with new.open("w") as fh:
        yaml.dump(doc, fh)
    text = run_cli(["diff", str(old), str(new)])
    assert text.code == 2
    assert re.search(r"^gpu0: removed \(was 97,247 MiB, 0 MiB used\)$", text.stdout, re.M)
    assert not re.search(r"^gpu1: (removed|added)", text.stdout, re.M)
    # issue 36: the spec's name in generated headers is not a change: each side is
    # compared under the new name, and the files that differ in nothing else are named
    assert not re.search(r"^[-+].*generated by layoutgen from", text.stdout, re.M)
    assert f"differ only in the spec's name in their generated headers ({old} -> {new})" in (
        text.stdout
    )
    back = json.loads(run_cli(["diff", "--format", "json", str(new), str(old)]).stdout)
    assert [c["device"] for c in back["changes"] if c["kind"] == "device_added"] == ["gpu0"]
