"""The MIG config rules: every rule ID a finding on a mig-parted config (or a DRA claim against the MIG
devices) can carry, with what it means and what to do. `migops validate`, the webhook and the reconciler
print these IDs in brackets; docs/troubleshooting.md is rendered from this table and the others beside
their reasons (mig/explain.py). An ID that gitops' nodes.yaml or the webhook also use is declared once,
here, and its text covers each place."""

from __future__ import annotations

from collections.abc import Mapping

from migops.mig.explain import Explanation

MIG_RULES: Mapping[str, Explanation] = {
    # --- reading the file -------------------------------------------------------------------------
    "not-utf8": Explanation(
        "The file (or nodes.yaml) is not UTF-8 text. A ConfigMap's data is UTF-8; mig-parted would also read "
        "UTF-16 with a byte-order mark, migops does not.",
        "Save the file as UTF-8 (`iconv -f UTF-16 -t UTF-8`).",
    ),
    "input-too-large": Explanation(
        "The text is larger than 1 MiB, the most a ConfigMap can hold.",
        "Split the configs over fewer geometries: configs that repeat a geometry can share a YAML anchor.",
    ),
    "yaml-syntax": Explanation(
        "The text is not YAML that go-yaml reads (as mig-parted reads it), or it cannot be converted to JSON "
        "as mig-parted converts it. The message quotes the parser and the line.",
        "Fix the YAML at the line shown; `migops validate` prints the line and column.",
    ),
    "yaml-too-large": Explanation(
        "The document expands to more than 100,000 YAML nodes after aliases (a YAML bomb, or a generated "
        "file far larger than any MIG config).",
        "Write fewer configs, or fewer aliases of large anchors.",
    ),
    "yaml-too-deep": Explanation(
        "The document nests deeper than 32 levels; a MIG config has 6.",
        "Flatten the document: it is not a mig-parted config as written.",
    ),
    "duplicate-key": Explanation(
        "A key is written twice in one mapping, or two keys become one (`yes` and `on`; `1` and `\"1\"`). "
        "mig-parted silently keeps one of them, sometimes a different one on each run.",
        "Remove or rename one of the two keys; the message names both lines.",
    ),
    "yaml-reading": Explanation(
        "A value reads differently from how it looks: a YAML 1.1 boolean other than true/false (`yes`, `on`), "
        "an integer with a base prefix or a leading zero (`010` is 8), a float where an integer is read, a "
        "null read as zero, an ignored tag, a merge (`<<`) that replaces a key written before it, or an "
        "empty device-filter (which matches every GPU). A warning: mig-parted reads it the way the message says.",
        "Write the value the way it is meant (`true`, `8`, a quoted string) so that nobody misreads it.",
    ),
    "config-name-converted": Explanation(
        "A config name is not a string in YAML 1.1 (`y:` is the boolean true), so mig-parted names the "
        "config `true`; the node label `nvidia.com/mig.config=y` never selects it.",
        'Quote the name (`"y":`).',
    ),
    "trailing-document": Explanation(
        "The file holds more than one YAML document; mig-parted reads only the first and ignores the rest.",
        "Remove the `---` and what follows, or move it to a file of its own.",
    ),
    "not-a-kubernetes-object": Explanation(
        "In a manifest stream, a document without `apiVersion` and `kind`: kubectl would refuse it.",
        "Give the document its apiVersion and kind, or split the bare mig-parted config into a file of its own.",
    ),
    "configmap-key": Explanation(
        'A ConfigMap that should hold the MIG config has no `data."config.yaml"` (or it is not a string): '
        "the GPU Operator's mig-manager reads the config from that key.",
        'Put the config under `data."config.yaml"` as a string (a YAML block scalar, `config.yaml: |`).',
    ),
    # --- mig-parted's parse rules -----------------------------------------------------------------
    "missing-version": Explanation("The config has keys but no `version`.", "Add `version: v1` at the top."),
    "unknown-version": Explanation(
        "`version` is not the string `v1` (in a MIG config or in nodes.yaml); `1` and `null` are not `v1` either.",
        'Write `version: v1` (nodes.yaml: `version: v1` too; quoting is optional, `"v1"`).',
    ),
    "unexpected-field": Explanation(
        "A key mig-parted (or nodes.yaml's schema) does not know: at the top only `version` and `mig-configs`, "
        "in an entry only `device-filter`, `devices`, `mig-enabled` and `mig-devices`; keys match exactly "
        "(`Version` is unexpected). The message lists the allowed keys.",
        "Fix the key's spelling or remove it.",
    ),
    "not-a-mapping": Explanation(
        "The document (a MIG config, or nodes.yaml) is not a mapping of keys to values.",
        "Start from `version: v1` and `mig-configs:` (nodes.yaml: `version: v1` and `assignments:`); see examples/.",
    ),
    "invalid-mig-configs": Explanation(
        "`mig-configs` is not a mapping of config names to lists of entries.",
        "Write `mig-configs:` followed by `  name:` and a list of entries.",
    ),
    "empty-mig-configs": Explanation(
        "`mig-configs` is empty or null: mig-parted requires at least one config.", "Add a config."
    ),
    "no-configs": Explanation(
        "The file holds no config at all (mig-parted's parser accepts it, but no node can select anything from it).",
        "Add the configs the nodes select, or check that the right file is named.",
    ),
    "invalid-config": Explanation(
        "A named config is not a list of entries.", "Write the config as a list: `- devices: all` and so on."
    ),
    "empty-config": Explanation(
        "A named config has no entries (`[]` or null).", "Give it at least one entry, or remove the name."
    ),
    "invalid-entry": Explanation(
        "An entry of a config is not a mapping.",
        "Each entry is a mapping with `devices`, `mig-enabled` and, when enabled, `mig-devices`.",
    ),
    "missing-required-field": Explanation(
        "An entry lacks `devices` or `mig-enabled` (or is null).",
        "Add the field: `devices: all` (or a list of GPU indices) and `mig-enabled: true|false`.",
    ),
    "invalid-devices": Explanation(
        "`devices` is neither `all` nor a list of GPU indices.", "Write `devices: all` or `devices: [0, 1]`."
    ),
    "invalid-device-filter": Explanation(
        "`device-filter` is neither a string nor a list of strings.",
        'Write a PCI device ID (`device-filter: "0x233010DE"`) or a list of them.',
    ),
    "invalid-mig-enabled": Explanation(
        "`mig-enabled` is not a boolean.", "Write `mig-enabled: true` or `mig-enabled: false`."
    ),
    "invalid-mig-devices": Explanation(
        "`mig-devices` is not a mapping of profile names to counts.", 'Write `mig-devices: {"1g.10gb": 7}`.'
    ),
    "profile-syntax": Explanation(
        "A `mig-devices` key is not a MIG profile name (`<g>g.<mem>gb`, `<c>c.<g>g.<mem>gb`, with `+me`, "
        "`+gfx`, `+me.all` or `-me` where the GPU has them).",
        "Fix the profile's spelling; `migops gpus` lists each model's profiles.",
    ),
    "invalid-count": Explanation(
        "A count is not an integer that fits in 64 bits.", "Write a whole number (at most the profile's maximum)."
    ),
    "negative-count": Explanation("A count is negative.", "Write a count of 0 or more."),
    "all-counts-zero": Explanation(
        "Every count of an entry's `mig-devices` is 0: mig-parted refuses it.",
        "Give at least one profile a count, or use `mig-devices: {}` for MIG enabled without instances.",
    ),
    "mig-devices-required": Explanation(
        "`mig-enabled: true` without `mig-devices`.",
        "Add `mig-devices` (`{}` for MIG mode with no instances).",
    ),
    "mig-devices-when-disabled": Explanation(
        "`mig-enabled: false` with `mig-devices` that are not empty.",
        "Remove `mig-devices`, or set `mig-enabled: true`.",
    ),
    "config-not-selected": Explanation(
        "The file holds several configs and the command was not told which one (`-c`).",
        "Name the config with `-c NAME`, or leave `-c` out to check every config.",
    ),
    "config-not-found": Explanation(
        "A config is named that does not exist: `-c NAME` on the command line; a nodes.yaml assignment "
        "(or `default`) naming a config config.yaml lacks; a node label `nvidia.com/mig.config` naming a config "
        "the MIG ConfigMap in force lacks (the webhook denies it; as a warning on a ConfigMap write, the nodes "
        "that select a config the new text removes). The message lists the configs there are and the nearest name.",
        "Fix the name, or add the config to config.yaml (through git when a MigSync manages the nodes).",
    ),
    # --- what mig-parted does not check -----------------------------------------------------------
    "device-filter-syntax": Explanation(
        "A device-filter is not a PCI ID (`0x233010DE`, optionally `:0x16C110DE` for the subsystem). "
        "mig-parted drops the parse error and the entry silently matches no GPU.",
        "Write the ID as `nvidia-smi --query-gpu=pci.device_id --format=csv` prints it.",
    ),
    "device-filter-unknown": Explanation(
        "A well-formed PCI ID that migops knows neither as a MIG-capable GPU nor as a GPU without MIG: taken as "
        "a GPU that cannot do MIG. A typo (`0x23301DE`) is the likelier story: the entry then selects nothing.",
        "Compare the ID with `migops gpus`; if it is a new GPU model, the catalogue needs its row (docs/catalogue.md).",
    ),
    "mig-not-capable": Explanation(
        "`mig-enabled: true` on a GPU that cannot do MIG (a display GPU, a T4, an unknown ID): mig-parted's "
        "assert fails on it every time.",
        "Narrow the entry with a device-filter naming the MIG-capable models, or set `mig-enabled: false` for that GPU.",
    ),
    "duplicate-device-index": Explanation("`devices` lists a GPU index twice.", "List each index once."),
    "negative-device-index": Explanation("`devices` lists a negative index.", "GPU indices start at 0."),
    "no-devices": Explanation(
        "`devices: []` selects no GPU (a warning).", "List the indices meant, or `devices: all`."
    ),
    "device-index-out-of-range": Explanation(
        "`devices` names an index beyond the node's GPUs (or beyond 15 without `--gpu`); mig-parted skips it. "
        "A warning.",
        "Check the node's GPU count (`nvidia.com/gpu.count`); remove the index if the entry is meant for "
        "smaller nodes.",
    ),
    "overlapping-entries": Explanation(
        "Two entries select the same GPU. With different geometries mig-parted applies both in turn and its "
        "assert can never pass (an error); identical ones are redundant (a warning).",
        "Give each GPU one entry: narrow `devices` or `device-filter`.",
    ),
    "gpu-not-covered": Explanation(
        "On the node's GPUs, one GPU is selected by no entry (a GPU without MIG included): mig-parted's assert "
        "requires every GPU to match.",
        "Add an entry for it (`mig-enabled: false` for a GPU that stays whole), or use `devices: all`.",
    ),
    "unknown-profile": Explanation(
        "The profile does not exist on that GPU model. The message names the nearest profile and the models "
        "that do have it.",
        "Use the model's own profile name (`migops gpus -o wide`), or narrow the entry with a device-filter to "
        "the models that have it.",
    ),
    "profile-name-drift": Explanation(
        "The name is what some driver versions call a profile (`7g.79gb` for `7g.80gb` on A100 80GB, "
        "`1g.24gb` for `1g.23gb` on GB200); the node's driver decides which name mig-parted accepts. A warning.",
        "Use the name the nodes' driver prints (`nvidia-smi mig -lgip`).",
    ),
    "invalid-compute-instance": Explanation(
        "A `<c>c.<g>g` compute instance that a `<g>g` GPU instance does not offer (valid: C == G, or C < G "
        "with 2C <= G+1).",
        "Use a compute-instance size the GPU instance offers, or the plain `<g>g` profile.",
    ),
    "count-exceeds-max": Explanation(
        "More instances of a profile than the GPU allows (after packing compute instances into GPU instances "
        "as mig-parted does).",
        "Lower the count to the profile's maximum (`migops gpus -o wide` shows it).",
    ),
    "placement-infeasible": Explanation(
        "The instances fit by count but have no placement without overlap on the GPU's valid start slices "
        "(an exact search, as NVML places them).",
        "Choose a geometry that fits: `migops plan` draws the slices; mixing 3g and 4g sizes is the usual cause.",
    ),
    "engine-budget": Explanation(
        "The instances need more engines (copy engines, decoders, encoders, JPEG decoders, OFA) than the GPU "
        "has; the message names the engines and the profiles that took them. One `+me` instance per GPU, and "
        "beside a `+me.all` instance only `-me` ones.",
        "Drop a `+me` (or `+me.all`) instance, or use profiles without media extensions.",
    ),
    "zero-count": Explanation(
        "A count of 0 (a warning): mig-parted compares the number of profiles, so the GPU never reads as "
        "configured and is reconfigured on every run.",
        "Remove the profile from `mig-devices` instead of writing 0.",
    ),
    "config-name-not-label": Explanation(
        "The config name is not a valid Kubernetes label value, so no node's `nvidia.com/mig.config` can name "
        "it (a warning).",
        "Rename it: at most 63 characters of letters, digits, `-`, `_` and `.`, starting and ending alphanumeric.",
    ),
    "strategy-mismatch": Explanation(
        "The geometry does not suit the MIG strategy the GPU Operator advertises devices under. `none`: the "
        "config creates MIG devices nothing advertises; `single`: more than one MIG device type on a node, MIG "
        "enabled and disabled GPUs mixed, or a MIG-enabled GPU without instances. From nodes.yaml: its "
        "`strategy` differs from the ClusterPolicy's `spec.mig.strategy` (nothing is applied). From the webhook "
        "on a ClusterPolicy: switching the strategy would break the nodes' configs.",
        "Make the geometry fit the strategy, or change the strategy (the ClusterPolicy and nodes.yaml together); "
        "relabel the nodes the message names before a strategy switch.",
    ),
    "no-mig-devices": Explanation(
        "Under `mixed`, a MIG-enabled GPU without instances advertises nothing (a warning).",
        "Give the GPU instances, or set `mig-enabled: false` to use it whole.",
    ),
    "fits-no-gpu": Explanation(
        "Checked against the catalogue (no `--gpu`): an entry without a device-filter fits no known GPU model. "
        "The closest models' problems are listed before it.",
        "Fix the geometry for the model meant (the listed problems say what fails where), or add a device-filter.",
    ),
    "does-not-fit-model": Explanation(
        "On a node whose GPU model is known but not its count (GPU Feature Discovery under `single`): the "
        "config does not fit that model (the problems before it say why), or no entry selects it.",
        "Fix the config for that model, or add an entry whose device-filter names it.",
    ),
    "problems-truncated": Explanation(
        "The config has more than 100 problems: the first 100 are listed and the rest counted by rule here (an "
        "error when any of them is one).",
        "Fix the listed problems first; they usually share a cause with the rest.",
    ),
    # --- DRA claims against the MIG devices (mig/dra.py) -----------------------------------------
    "dra-unknown-profile": Explanation(
        "A ResourceClaim's selectors accept no MIG profile of any GPU model migops knows (a typo such as "
        "`3g.45gb`); the message names the closest. The scheduler would leave the claim pending forever.",
        "Fix the selector (the profile attribute's value); docs/dra.md lists the attributes the driver publishes.",
    ),
    "dra-selects-nothing": Explanation(
        "The claim's DeviceClass narrows the MIG profiles (migops's `mig-<profile>.nvidia.com`, known by name) "
        "and the request's own selectors ask for another, or for a profile that does not exist: together they "
        "select no device (class `mig-1g.10gb.nvidia.com` with a selector `profile == \"3g.45gb\"`). The message "
        "names both; the scheduler would leave the claim pending forever.",
        "Make them agree: name the class of the profile you want, or the driver's `mig.nvidia.com` with your "
        "selector, or drop the selector.",
    ),
    "dra-profile-not-in-cluster": Explanation(
        "The claim selects profiles that only GPU models no node of the cluster has offer.",
        "Select a profile of the cluster's models (the message names the closest), or add nodes of that model.",
    ),
    "dra-profile-not-configured": Explanation(
        "The cluster's GPU models have the profile, but no geometry of the MIG config in force creates it, so "
        "the claim stays pending.",
        "Add the profile to a config the nodes use (through git), or `migops suggest` for a geometry that serves "
        "the pending claims.",
    ),
    "dra-selector-error": Explanation(
        "A CEL selector of the claim (or of its DeviceClass) fails when evaluated on MIG devices; the scheduler "
        "fails the claim too.",
        "Fix the expression the message quotes (an attribute's type, a missing `has()` guard).",
    ),
    # --- the catalogue against generate-config outputs (`migops gpus --check`, mig/generated.py) ---
    "not-generate-config": Explanation(
        "A file given to `migops gpus --check` is not `nvidia-mig-parted generate-config` output: a config other "
        "than all-disabled, all-enabled, all-balanced and all-<profile>, an entry that is not one profile at its "
        "maximum count on `devices: all`, or device filters on some entries only. What it says of the hardware "
        "cannot be read.",
        "Give the output as generate-config (or mig-manager's `<node>-mig-config` ConfigMap) wrote it, unedited; "
        "check hand-written configs with `migops validate`.",
    ),
    "catalogue-unknown-gpu": Explanation(
        "The output lists MIG profiles for a device ID the catalogue has no MIG profile table for: migops "
        "would take that GPU as one without MIG.",
        "Report the model with the output (docs/catalogue.md, Adding a GPU); until the catalogue has it, migops "
        "cannot validate configs for it.",
    ),
    "catalogue-model-unnamed": Explanation(
        "The output names no device ID (a node of one GPU model writes no device-filter) and its profiles do "
        "not tell which catalogue model it is.",
        "Give the node's GPU with `--gpu` (a PCI device ID or GFD's `nvidia.com/gpu.product`).",
    ),
    "catalogue-lacks-profile": Explanation(
        "The hardware lists a profile the catalogue does not have for that model (and none of the same slices "
        "under another memory figure): configs using it would be refused by `migops validate`.",
        "Report it with the output and the driver version (docs/catalogue.md); the output is the hardware's word.",
    ),
    "catalogue-extra-profile": Explanation(
        "The catalogue has a profile the hardware does not list: a config using it passes `migops validate` and "
        "fails on the node. Older drivers lack some profiles (A100's 1g.10gb needs R525 or later).",
        "Check the node's driver version; if a current driver lacks it too, report it with the output.",
    ),
    "catalogue-max-count": Explanation(
        "The hardware allows a different number of instances of a profile on one GPU than the catalogue says.",
        "Report it with the output and the driver version; until fixed, keep counts within the hardware's.",
    ),
    "catalogue-memory": Explanation(
        "The hardware names a profile with another memory figure than the catalogue (the same slices and "
        "attributes): the driver reports another memory size, so the name differs (as `7g.79gb` for `7g.80gb`). "
        "Configs must use the name the node's driver prints.",
        "Report it with the output and the driver version; the catalogue then records the name as an alias.",
    ),
    "catalogue-alias": Explanation(
        "The hardware names a profile by a name the catalogue records as an alias of its own (name drift between "
        "drivers). A warning: migops accepts both names.",
        "Nothing.",
    ),
}
