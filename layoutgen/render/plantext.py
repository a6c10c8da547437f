"""``layoutgen plan``'s text: the budget (:func:`layoutgen.solve.plan.to_text`), where
each layer of each service sits, device by device, in ranges, whatever placed it
(``experts:``, hand-written ``tensor_overrides``, ``--cpu-moe``), and each service's
argv as the runtime gets it.

The layer map comes from the ledger's per-tensor placement
(:func:`layoutgen.render.ledger.tensor_places`), so 66 single ``-ot`` rules read as
``gpu0  experts of 15 layers: 3-17`` rather than as a rule list.
"""

from __future__ import annotations

import shlex

from layoutgen.core.placement import expert_layer
from layoutgen.models.tensors import format_layers
from layoutgen.render.ledger import TIED_COPY, tensor_places
from layoutgen.render.validate import Validated
from layoutgen.solve.plan import Plan, ServicePlan, to_text


def plan_text(v: Validated, plan: Plan) -> str:
    """The plan as ``layoutgen plan`` prints it: the budget, then each service's layer
    map and argv, before the speeds."""
    blocks = to_text(plan).rstrip("\n").split("\n\n")
    extra = ["\n".join(m) for sp in plan.services if (m := layer_map(v, plan, sp))] + argv_blocks(
        plan
    )
    at = next(
        (i for i, b in enumerate(blocks) if b.startswith(("decode speed", "runtime ", "warning:"))),
        len(blocks),
    )
    return "\n\n".join(blocks[:at] + extra + blocks[at:]) + "\n"


def layer_map(v: Validated, plan: Plan, sp: ServicePlan) -> list[str]:
    """Per device (GPUs in the host's order, then host RAM): the layers whose other
    tensors (attention, norms, shared experts: the layer split) are there, the layers
    whose routed experts all are, and single expert tensors apart from their layer."""
    places = tensor_places(v, sp)
    if not places or not any(expert_layer(t) is not None for t in places):
        return []
    layers: dict[str, set[int]] = {}
    experts: dict[int, dict[str, list[str]]] = {}
    loose: dict[str, list[str]] = {}
    for name, (dev, _) in places.items():
        parts = name.split(".")
        if name.startswith("blk.") and len(parts) > 2 and parts[1].isdigit():
            layer = int(parts[1])
            if expert_layer(name) is not None:
                experts.setdefault(layer, {}).setdefault(dev, []).append(name)
            else:
                layers.setdefault(dev, set()).add(layer)
        else:
            loose.setdefault(dev, []).append(name)
    whole: dict[str, list[int]] = {}
    single: dict[str, list[str]] = {}
    for layer, where in sorted(experts.items()):
        if len(where) == 1:
            (dev,) = where
            whole.setdefault(dev, []).append(layer)
        else:
            for dev, names in where.items():
                single.setdefault(dev, []).extend(sorted(names))
    rank = {d.id: i for i, d in enumerate(plan.devices)}
    devices = sorted(
        set(layers) | set(whole) | set(single) | set(loose),
        key=lambda d: (d == "host", rank.get(d, 0), d),
    )
    # the plan's "expert layers" block gives the routed experts where the plan chose
    # them; a service placed by hand-written rules has none: its map says them
    with_experts = not sp.expert_layers
    lines = [
        f"{sp.name}: layers by device (the layer split"
        + (", then routed experts)" if with_experts else ")")
    ]
    for dev in devices:
        label = "host RAM" if dev == "host" else dev
        bits = []
        own = sorted(layers.get(dev, ()))
        extra = [_short(t) for t in sorted(loose.get(dev, ()))]
        if own or extra:
            ranged = f"layers {format_layers(own, sep='-', join=', ')}" if own else ""
            bits.append(", ".join(b for b in [ranged, *extra] if b))
        if with_experts and whole.get(dev):
            n = len(whole[dev])
            bits.append(
                f"experts of {n} layer{'s' if n != 1 else ''}: "
                f"{format_layers(whole[dev], sep='-', join=', ')}"
            )
        if with_experts and single.get(dev):
            bits.append("single expert tensors: " + ", ".join(_short(t) for t in single[dev]))
        if not bits:
            continue
        lines.append(f"  {label:<9} {bits[0]}")
        lines += [f"  {'':<9} {b}" for b in bits[1:]]
    return lines


def _short(name: str) -> str:
    return name if name == TIED_COPY else name.removesuffix(".weight")


def argv_blocks(plan: Plan) -> list[str]:
    """Each service's argv, one option and its values a line, shell-quoted."""
    out = []
    for sp in plan.services:
        if not sp.argv:
            continue
        lines = [f"{sp.name}: argv"]
        groups: list[list[str]] = []
        for token in sp.argv:
            if not groups or (token.startswith("-") and len(token) > 1):
                groups.append([token])
            else:
                groups[-1].append(token)
        text = [shlex.join(g) for g in groups]
        ends = [" \\"] * (len(text) - 1) + [""]
        lines += [
            f"  {'' if i == 0 else '    '}{t}{end}"
            for i, (t, end) in enumerate(zip(text, ends, strict=True))
        ]
        out.append("\n".join(lines))
    return out
