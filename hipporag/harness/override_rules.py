"""What a regression file or a rerun may hand to `python run.py`: the harness's own knobs and config groups.

Why: a regression file or a run folder may come from someone else, and Hydra does what its overrides say: it
instantiated `hydra.callbacks.x._target_=shutil.copy` (a file written outside the project, and the regression
said "pass"), and it resolves `${oc.env:...}` (an API key copied into metrics.json). So only this passes:
- `knob=value` for a top-level knob (`core.knobs.Knobs`);
- `group=option` for a shipped config group option (`conf/<group>/<option>.yaml`), `+group=option` for a
  group the defaults list does not name (`+ablation=full`);
- `group.key=value` for a key some part of that group declares (`llm.base_url`, `extractor.path`), and any
  key below one (`embedder.instructions.query`, `extractor.fallback.name`);
- values with plain interpolations (`${dataset.name}`), the project's own resolver `${unique_suffix:}`, and
  a key's shipped value as shipped (`cache_dir: ${oc.env:HIPPORAG_CACHE_DIR,outputs/cache}` in a saved config).
Refused: `hydra.` / `hydra/` keys, `_target_` anywhere in a key, `~` and `++`, `+key=`, `key@package`, flags
(`--config-dir`), sweeps, a saved config's `defaults` list, and every other resolver (`${oc.env:...}`,
`${oc.decode:...}`, `${now:...}`).

Credentials are aimed by the user alone: a part sends the value of the environment variable its `api_key_env`
names as a bearer token to its `base_url` (core.api_keys, llm.openai_chat, index.embed). A file naming
`llm.api_key_env=AWS_SECRET_ACCESS_KEY` and its own `llm.base_url` would get that secret. So a file never sets
an `api_key_env` (`file_override_refusal`), and in the config a run would compose (`credential_refusal`)
every `api_key_env` is conf/'s own value or the user's, and a `base_url` that would receive a set variable's
value is the user's: given on the command line, never taken from the file.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping

from hipporag.core.paths import CONF_DIR
from hipporag.core.resolvers import NAMES

PROJECT_RESOLVERS = frozenset(NAMES)
_INTERPOLATION = re.compile(r"\$\{\s*([^\s{}:$]*)\s*(:?)")


@functools.cache
def config_groups() -> dict[str, frozenset[str]]:
    """{group: its shipped options}, from conf/."""
    return {
        d.name: frozenset(p.stem for p in d.glob("*.yaml"))
        for d in sorted(CONF_DIR.iterdir())
        if d.is_dir() and d.name != "hydra"
    }


@functools.cache
def _shipped_config() -> dict:
    import yaml

    return yaml.safe_load((CONF_DIR / "config.yaml").read_text()) or {}


@functools.cache
def default_groups() -> frozenset[str]:
    """The groups conf/config.yaml's defaults list names (those take `group=option`, never `+group=`)."""
    names = set()
    for item in _shipped_config().get("defaults") or []:
        if isinstance(item, Mapping):
            names.update(str(k).lstrip("+~").split("@")[0] for k in item)
    return frozenset(names)


@functools.cache
def knob_names() -> frozenset[str]:
    from hipporag.core.knobs import Knobs

    return frozenset(f.name for f in dataclasses.fields(Knobs))


@functools.cache
def group_keys(group: str) -> frozenset[str]:
    """The keys a config group may set: its selector and every option of any of its parts (the reader's and the
    question selection's options; none for an ablation, which sets knobs)."""
    from hipporag.data.selection import QuestionOptions
    from hipporag.harness.settings import REGISTRIES
    from hipporag.llm.reader import ReaderOptions

    fixed = {"reader": ReaderOptions, "questions": QuestionOptions}  # the groups that are one part, not a choice
    if group in fixed:
        return frozenset(f.name for f in dataclasses.fields(fixed[group]))
    registry = REGISTRIES.get(group)
    if registry is None:
        return frozenset()
    keys = {registry.selector}
    for _, part in registry.items():
        if part.options is not None:
            keys.update(f.name for f in dataclasses.fields(part.options))
    return frozenset(keys)


@functools.cache
def _shipped_values(key: str) -> frozenset[str]:
    """Every value conf/ ships for `key` (`cache_dir`, `dataset.name`), as written."""
    import yaml

    group, _, sub = key.partition(".")
    if not sub:
        value = _shipped_config().get(key)
        return frozenset({value} if isinstance(value, str) else ())
    values = set()
    for path in (CONF_DIR / group).glob("*.yaml"):
        value = (yaml.safe_load(path.read_text()) or {}).get(sub)
        if isinstance(value, str):
            values.add(value)
    return frozenset(values)


def value_refusal(text: str) -> str | None:
    """Why a value's interpolations are refused, or None (plain `${key}` and `${unique_suffix:}` pass)."""
    for match in _INTERPOLATION.finditer(text):
        name, resolver = match.groups()
        if not name:
            return f"holds an interpolation inside an interpolation ({match.group(0)}...): not allowed here"
        if resolver and name not in PROJECT_RESOLVERS:
            return f"uses the resolver ${{{name}:...}}: only plain ${{key}} interpolations are allowed here"
    return None


def key_refusal(key: str) -> str | None:
    """Why a config key (`llm.base_url`, `damping`) is not the harness's to set, or None."""
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return "sets Hydra itself: only the harness's knobs and config groups are allowed"
    if "_target_" in key:
        return "names a _target_: nothing is instantiated from a regression or a rerun"
    parts = key.split(".")
    if len(parts) == 1:
        if key in knob_names() or key in config_groups():
            return None
        return "is not a knob or a config group of the harness (see conf/config.yaml and conf/<group>/)"
    group, option = parts[0], parts[1]
    if group not in config_groups():
        return f"is not a knob or a config group of the harness ({group!r} is neither)"
    if option not in group_keys(group):
        known = ", ".join(sorted(group_keys(group))) or "none: it sets knobs"
        return f"is not a key of the {group} group (its keys: {known})"
    return None


def override_refusal(override: str) -> str | None:
    """Why one override is refused (a phrase that follows `override <x>`), or None when it may run."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    if override.startswith("-"):
        return "is a command-line flag: only key=value overrides are allowed"
    try:
        parsed = OverridesParser.create().parse_override(override)
    except HydraException as e:  # its parse errors (OverrideParseException and the grammar's own)
        return f"is not an override Hydra can read ({' '.join(str(e).split())[:160]})"
    key = parsed.key_or_group
    why = key_refusal(key)
    if why:
        return why
    if parsed.package is not None:
        return "names a package (@): not allowed here"
    if parsed.type == OverrideType.DEL:
        return "deletes a key (~): not allowed here"
    if parsed.type == OverrideType.FORCE_ADD:
        return "force-adds a key (++): not allowed here"
    if parsed.is_sweep_override():
        return "is a sweep: one regression or rerun is one run"
    is_group = key in config_groups()
    if parsed.type == OverrideType.ADD and not (is_group and key not in default_groups()):
        return "adds a key (+): allowed only to pick a group the defaults list does not name (+ablation=full)"
    if is_group:
        value = parsed.value()
        if not isinstance(value, str) or value not in config_groups()[key]:
            options = ", ".join(sorted(config_groups()[key]))
            return f"picks {value!r}, which is not an option of the {key} group (its options: {options})"
        if parsed.type != OverrideType.ADD and key not in default_groups():
            return f"picks a group the defaults list does not name: write +{override}"
    return value_refusal(override.partition("=")[2])


def config_refusal(config) -> tuple[str, str] | None:
    """(key, why) for the first thing a saved config (.hydra/config.yaml, as plain data) may not hold, or None."""
    if not isinstance(config, Mapping):
        return "(top level)", "is not a mapping of knobs and config groups"
    if "defaults" in config:
        return "defaults", "is a defaults list: a saved config is one composed config, it picks nothing"

    def walk(node, key: str):
        if isinstance(node, Mapping):
            for k, v in node.items():
                child = f"{key}.{k}" if key else str(k)
                if "_target_" in str(k):
                    return child, "names a _target_: nothing is instantiated from a rerun"
                found = walk(v, child)
                if found:
                    return found
        elif isinstance(node, list):
            for i, v in enumerate(node):
                found = walk(v, f"{key}.{i}")
                if found:
                    return found
        elif isinstance(node, str) and node not in _shipped_values(key):
            why = value_refusal(node)
            if why:
                return key, why
        return None

    for top, value in config.items():
        top = str(top)
        why = key_refusal(top)
        if why:
            return top, why
        if isinstance(value, Mapping) and top in config_groups():
            for sub in value:
                why = key_refusal(f"{top}.{sub}")
                if why:
                    return f"{top}.{sub}", why
        found = walk(value, top)
        if found:
            return found
    return None


CREDENTIAL_KEY = "api_key_env"  # names the environment variable whose value a part sends as its API key
ENDPOINT_KEY = "base_url"  # where that part sends it
CREDENTIAL_WHY = "chooses the environment variable sent as an API key: only your command line may choose it"


def file_override_refusal(override: str) -> str | None:
    """`override_refusal` for an override a file holds (a regression's): it may not name an `api_key_env`
    either, in any group."""
    why = override_refusal(override)
    if why:
        return why
    key = override.partition("=")[0].lstrip("+")  # parsed above: a plain key, at most one `+`
    return CREDENTIAL_WHY if key.rsplit(".", 1)[-1] == CREDENTIAL_KEY else None


def user_values(overrides) -> dict[str, object]:
    """{key: value} of the user's own command-line overrides (checked by `override_refusal` first)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    return {o.key_or_group: o.value() for o in map(parser.parse_override, overrides)}


def credential_refusal(config, given: Mapping, environ: Mapping) -> tuple[str, str] | None:
    """(key, why) for the first credential the composed `config` (plain data, resolved) would aim where the
    user did not: an `api_key_env` that is neither conf/'s value nor the user's (`given`, {key: value}), or a
    `base_url` that is not the user's while the variable its part names is set in `environ`; likewise a
    model repository's own code run (`trust_remote_code: true`) for a model that neither conf/ pairs with it
    nor the user chose. None when safe."""
    for path, node in _mappings(config, ""):
        found = _remote_code_refusal(path, node, given)
        if found:
            return found
        env_name = node.get(CREDENTIAL_KEY)
        if CREDENTIAL_KEY in node:
            key = f"{path}.{CREDENTIAL_KEY}" if path else CREDENTIAL_KEY
            if not _given(key, env_name, given) and env_name not in _shipped_values(key):
                return key, f"({env_name}) {CREDENTIAL_WHY}"
        url = node.get(ENDPOINT_KEY)
        if url is not None and isinstance(env_name, str) and environ.get(env_name):
            key = f"{path}.{ENDPOINT_KEY}" if path else ENDPOINT_KEY
            if not _given(key, url, given):
                return key, (
                    f"would receive the API key in ${env_name} at a URL the file chose: "
                    "only your command line may aim a credential"
                )
    return None


def _given(key: str, value, given: Mapping) -> bool:
    """Whether the user's command line set `key` to `value` (what the run will use)."""
    return key in given and str(given[key]) == str(value)


def _mappings(node, path: str):
    """(path, mapping) for every mapping in nested data, the top one included (lists by index)."""
    if isinstance(node, Mapping):
        yield path, node
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for k, v in items:
        yield from _mappings(v, f"{path}.{k}" if path else str(k))


REMOTE_CODE_KEY = "trust_remote_code"  # loads and runs the model repository's own Python code


def _remote_code_refusal(path: str, node: Mapping, given: Mapping) -> tuple[str, str] | None:
    """A part that would run its model repository's code for a model the file chose: refused unless conf/
    ships that model with `trust_remote_code` (NV-Embed-v2, GritLM) or the user named the model or allowed it."""
    if node.get(REMOTE_CODE_KEY) is not True:
        return None
    key = f"{path}.{REMOTE_CODE_KEY}" if path else REMOTE_CODE_KEY
    model, local = node.get("model"), node.get("path")
    chosen = _given(key, True, given) or any(k in given for k in (f"{path}.model", f"{path}.path"))
    if chosen or (model, local) in _shipped_remote_code(path.partition(".")[0]):
        return None
    return key, (
        f"would run the code of {local or model} (trust_remote_code) for a model the file chose: "
        "only your command line may allow that"
    )


@functools.cache
def _shipped_remote_code(group: str) -> frozenset[tuple]:
    """The (model, path) pairs conf/<group>/ ships with `trust_remote_code: true`."""
    import yaml

    pairs = set()
    for path in (CONF_DIR / group).glob("*.yaml") if group else ():
        doc = yaml.safe_load(path.read_text()) or {}
        if isinstance(doc, dict) and doc.get(REMOTE_CODE_KEY) is True:
            pairs.add((doc.get("model"), doc.get("path")))
    return frozenset(pairs)
