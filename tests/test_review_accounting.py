"""Issue 36 acceptance: for every pair of example layouts and 50 seeded single-key
changes of them, the diff summary's moves sum exactly to the device deltas, every
device's terms sum to its change, and no line repeats."""

from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from layoutgen.errors import InvalidInput, LayoutgenError
from layoutgen.render.diff import Version, load, summarise

from conftest import ROOT

LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))


@pytest.fixture(scope="module")
def examples() -> dict[str, Version]:
    return {p.name: load(str(p)) for p in LAYOUTS}


def assert_accounted(summary: list[dict[str, Any]], where: str) -> None:
    """Every device line's terms sum to its change; the tensor terms are the moves
    listed (in minus out, per service and device); no line twice."""
    texts = [c["text"] for c in summary]
    assert len(texts) == len(set(texts)), f"{where}: a line repeats"
    moved: dict[tuple[str, str], int] = {}
    for c in summary:
        if c["kind"] != "moved":
            continue
        if c["old"] != "-":
            moved[(c["service"], c["old"])] = (
                moved.get((c["service"], c["old"]), 0) - c["bytes_out"]
            )
        if c["new"] != "-":
            moved[(c["service"], c["new"])] = moved.get((c["service"], c["new"]), 0) + c["bytes_in"]
    for c in summary:
        if c["kind"] != "device":
            continue
        delta = c["used"][1] - c["used"][0]
        assert sum(t["bytes"] for t in c["terms"]) == delta, f"{where}: {c['text']}"
        for t in c["terms"]:
            if t["what"] == "tensors":
                assert t["bytes"] == moved.get((t["service"], c["device"])), (where, t)
            # a weight figure not the sum of its tensors is named, never "other"
            assert t["what"] != "outside", (where, c["text"])
    checks = [c for c in summary if c["kind"] == "check"]
    assert all(c["ok"] for c in checks), (where, checks)


def test_every_pair_of_example_layouts(examples: dict[str, Version]) -> None:
    pairs = 0
    for a, b in itertools.permutations(examples, 2):
        assert_accounted(summarise(examples[a], examples[b]), f"{a} -> {b}")
        pairs += 1
    assert pairs == len(LAYOUTS) * (len(LAYOUTS) - 1)


#: keys a reviewer changes one at a time, and how
_SIZE_KEYS = {"vram", "reserve", "ram", "ram_reserve", "gpu_overhead"}
_INT_KEYS = {"ctx", "max_layers", "threads", "threads_batch", "batch", "ubatch", "parallel"}
_CACHE = ("f16", "q8_0", "q4_0")


def _candidates(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _candidates(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _candidates(v, (*path, i))
    elif path and path[-1] in _SIZE_KEYS | _INT_KEYS | {"cache_type_k", "cache_type_v"}:
        out.append(path)
    return out


def _changed(value: Any, key: str, rng: random.Random) -> Any:
    if key in ("cache_type_k", "cache_type_v"):
        return rng.choice([c for c in _CACHE if c != value])
    if key in _INT_KEYS and isinstance(value, int):
        return max(1, int(value * rng.choice((0.5, 0.75, 1.25, 2))))
    text = str(value)
    digits = "".join(ch for ch in text if ch.isdigit())
    unit = text[len(digits) :] if text.startswith(digits) else ""
    if not digits:
        return value
    return f"{max(1, int(int(digits) * rng.choice((0.5, 0.85, 0.95, 1.1))))}{unit}"


def _variants(tmp: Path, want: int, seed: int = 36) -> list[tuple[str, Path, Path]]:
    """``want`` single-key changes of the example layouts that still validate."""
    rng = random.Random(seed)
    shutil.copytree(ROOT / "layouts" / "models", tmp / "models")
    yaml = YAML()
    out: list[tuple[str, Path, Path]] = []
    tries = 0
    while len(out) < want and tries < want * 6:
        tries += 1
        src = rng.choice(LAYOUTS)
        doc = yaml.load(src.read_text())
        paths = _candidates(doc)
        if not paths:
            continue
        # services' keys move bytes more often than the host's sizes: ask them more
        path = rng.choice(paths + [p for p in paths if p[0] == "services"] * 3)
        node = doc
        for p in path[:-1]:
            node = node[p]
        old = node[path[-1]]
        new = _changed(old, str(path[-1]), rng)
        if new == old:
            continue
        node[path[-1]] = new
        dst = tmp / f"v{tries:03d}-{src.name}"
        with dst.open("w") as fh:
            yaml.dump(doc, fh)
        base = tmp / src.name
        if not base.exists():
            shutil.copy(src, base)
        try:
            load(str(dst))
        except (InvalidInput, LayoutgenError):
            continue  # does not fit or is refused: not a change a reviewer sees
        out.append((f"{src.name} {'.'.join(map(str, path))}: {old} -> {new}", base, dst))
    return out


def test_fifty_seeded_single_key_changes(tmp_path: Path) -> None:
    found = _variants(tmp_path, 50)
    assert len(found) == 50
    effective = 0
    for what, base, dst in found:
        summary = summarise(load(str(base)), load(str(dst)))
        assert_accounted(summary, what)
        kinds = {c["kind"] for c in summary}
        # the change is said: as a spec line, a setting, a resize, or "no effect"
        assert kinds & {"spec", "setting", "device_resized", "no_effect"}, (what, summary)
        effective += "device" in kinds
    assert effective >= 20  # most changes move bytes: the check is not vacuous
