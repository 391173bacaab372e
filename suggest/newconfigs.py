"""New named configs (nodes.yaml `suggest.newConfigs: true`): when no config of config.yaml offers a
pending profile, one that does -- `suggest-<profile>`, the most instances of that profile each GPU model
of the cluster holds (`migops.mig.placement.place` says how many fit), one entry per model by
device-filter. It is judged like any other config (`mig.fit` on each node, the agent's plan) and the
solver prefers existing configs to it (objective 4); config.yaml gains it only when the proposal uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import yaml

from migops.mig.catalogue import GpuModel
from migops.mig.placement import place
from migops.suggest.edit import TextEdits
from migops.suggest.model import Demand, NodeSupply, profile_key


def _most(model: GpuModel, name: str) -> int:
    """How many instances of GI profile `name` one GPU of this model holds (0: none)."""
    table = model.table
    gi = next((g for g in model.profiles if g.name == name), None)
    if table is None or gi is None:
        return 0
    for count in range(gi.max_count, 0, -1):
        if place(table, {gi: count}) is not None:
            return count
    return 0


def candidates(
    nodes: Sequence[NodeSupply], demands: Iterable[Demand], offered: set[str], names: Iterable[str]
) -> dict[str, str]:
    """name -> the config's text under mig-configs (unindented), for each pending profile no existing
    config offers (`offered`) that a GPU model of the nodes has as a GPU-instance profile."""
    models = sorted({g for n in nodes for g in n.gpus.gpus if g.mig_capable}, key=lambda g: g.device_id)
    taken = set(names)
    out: dict[str, str] = {}
    for key in sorted({k for d in demands for k in d.keys} - offered):
        entries = []
        for model in models:
            gi = next((g for g in model.profiles if profile_key(g.name) == key), None)
            count = _most(model, gi.name) if gi is not None else 0
            if gi is None or not count:
                continue
            entries.append(
                f'  - device-filter: ["{model.device_id}"]\n    devices: all\n    mig-enabled: true\n'
                f'    mig-devices:\n      "{gi.name}": {count}\n'
            )
        name = f"suggest-{key}"
        if entries and name not in taken:
            out[name] = f"{name}:\n" + "".join(entries)
    return out


def add_configs(text: str, configs: Mapping[str, str]) -> str:
    """config.yaml's text with these configs appended to `mig-configs`, at its indentation; the rest of
    the file (comments included) as it was. ValueError when mig-configs is not a block mapping."""
    if not configs:
        return text
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    found = None
    if isinstance(root, yaml.MappingNode):
        found = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "mig-configs"), None)
    if not isinstance(found, yaml.MappingNode) or found.flow_style or not found.value:
        raise ValueError("config.yaml: mig-configs is not a block mapping; new configs cannot be added in place")
    t = TextEdits(text if text.endswith("\n") else text + "\n")
    indent = " " * found.value[0][0].start_mark.column
    block = "".join("".join(f"{indent}{line}\n" for line in body.splitlines()) for body in configs.values())
    at = t.line_start(t.end_line(found))
    t.edits.append((at, at, block))
    return t.apply()
