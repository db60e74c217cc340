"""Secrets out of everything the harness writes, recognised by their value, not by the name of their key.

Why: a key name says nothing about `llm.base_url=http://user:pw@host/v1` or `dataset.name=${oc.env:API_KEY}`;
both once reached metrics.json, run.log, Hydra's files and W&B. The writers pass their text through `redact`
(or their data through `redact_obj`), which replaces every known secret value with `***`.

What is a secret (a process-wide registry, filled from the environment on first use and from each config):
- the value of an environment variable whose name looks like a credential (a `_`-separated part such as
  TOKEN, SECRET, PASSWORD, KEY, APIKEY, CREDENTIALS; `TOKENIZERS_PARALLELISM` is not one);
- the value of the variables a config names as API key (`llm.api_key_env`, `embedder.api_key_env`, ...);
- the value of every variable an `${oc.env:NAME}` interpolation of the config reads (set in the
  environment; the config's default for an unset one is not a secret), except the shipped config's own
  settings (`conf/`'s `${oc.env:...}`: the cache folder and mode) unless their name looks like a credential;
- a URL's userinfo: `scheme://user:pw@host` becomes `scheme://user:***@host`, `scheme://token@host`
  becomes `scheme://***@host`, wherever it appears (by pattern; the password is registered too).
Values shorter than MIN_LENGTH (4), plain words of config (true, false, none, auto, ...) and numbers of
fewer than 8 digits are never registered: replacing "no", "1" or "2026" everywhere would garble words, counts
and dates while hiding nothing (a credential that short is guessed anyway).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

MASK = "***"
MIN_LENGTH = 4
COMMON_WORDS = frozenset({"true", "false", "none", "null", "auto", "yes", "off", "on", "local", "shared"})
CREDENTIAL_PARTS = frozenset(
    {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS"}
)
NOT_A_VALUE = frozenset({"FILE", "PATH", "DIR", "URL"})  # `HF_TOKEN_PATH`, `SSH_KEY_FILE`: where, not what
# `scheme://user:pw@`, found from its `://` (a backslash before `:` too: Hydra escapes it in a sweep job's
# overrides). The scheme is not part of the match, only required by the lookbehind: a pattern that began at
# the scheme's first letter would rescan every run of letters to its end from each of its positions, which
# is quadratic on long unbroken text (64k characters took 33 s). From `://`, each part stops at the next `/`,
# so the scan is linear in the text whatever it holds.
_URL_USERINFO = re.compile(
    r"(?<=[A-Za-z0-9+.\-])(?P<scheme>\\?://)(?P<user>[^\s/?#@:'\"\\]+)(?:(?P<sep>\\?:)(?P<pw>[^\s/?#@'\"]*))?@"
)
_OC_ENV = re.compile(r"\$\{\s*oc\.env\s*:\s*([^,}\s]+)")

_secrets: set[str] = set()
_from_environment = False


def looks_like_credential(name: str) -> bool:
    """`OPENAI_API_KEY`, `HF_TOKEN`, `DB_PASSWORD`: a `_`-separated part of the name says so (not `PWD`, the
    working folder; not `HF_TOKEN_PATH`, a file's place)."""
    parts = re.split(r"[_\-.]", name.upper())
    return bool(CREDENTIAL_PARTS & set(parts)) and parts[-1] not in NOT_A_VALUE


def add_secret(value) -> None:
    """Register one secret value (ignored when too short or a plain word: see the module docstring)."""
    if not isinstance(value, str):
        return
    value = value.strip()
    if len(value) < MIN_LENGTH or value.lower() in COMMON_WORDS or (value.isdigit() and len(value) < 8):
        return
    _secrets.add(value)


def _load_environment() -> None:
    global _from_environment
    if not _from_environment:
        _from_environment = True
        for name, value in os.environ.items():
            if looks_like_credential(name):
                add_secret(value)


def secrets() -> frozenset[str]:
    _load_environment()
    return frozenset(_secrets)


def clear() -> None:
    """Forget every registered value (tests); the environment is read again on next use."""
    global _from_environment
    _secrets.clear()
    _from_environment = False


def _shipped_env_names() -> frozenset[str]:
    """The variables the shipped conf/ reads through `${oc.env:...}` (the project's own settings)."""
    from hipporag.core.paths import CONF_DIR

    names = set()
    for path in CONF_DIR.rglob("*.yaml"):
        names.update(_OC_ENV.findall(path.read_text(errors="replace")))
    return frozenset(names)


def _strings(obj) -> Iterable[tuple[str, str]]:
    """(key, string) for every string in nested mappings and lists."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if isinstance(v, str):
                yield str(k), v
            else:
                yield from _strings(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from (("", v),) if isinstance(v, str) else _strings(v)


def register_config(cfg) -> None:
    """Register the secrets a config carries: `${oc.env:NAME}` values, API-key variables, URL passwords.
    `cfg` is an OmegaConf config (read unresolved, so that interpolations are seen) or plain data."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    _load_environment()
    if isinstance(cfg, DictConfig | ListConfig):
        cfg = OmegaConf.to_container(cfg, resolve=False)
    shipped = None
    for key, value in _strings(cfg):
        if key.endswith("api_key_env") and value:
            add_secret(os.environ.get(value))
        for name in _OC_ENV.findall(value):
            if shipped is None:
                shipped = _shipped_env_names()
            if name not in shipped or looks_like_credential(name):
                add_secret(os.environ.get(name))
        for match in _URL_USERINFO.finditer(value):
            add_secret(match.group("pw"))  # a user name alone is masked in URLs, never registered


def _mask_userinfo(match: re.Match) -> str:
    if match.group("pw") is not None:
        return f"{match.group('scheme')}{match.group('user')}{match.group('sep')}{MASK}@"
    return f"{match.group('scheme')}{MASK}@"


def redact(text: str) -> str:
    """`text` with every registered secret and every URL credential replaced by `***`."""
    if not isinstance(text, str) or not text:
        return text
    text = _URL_USERINFO.sub(_mask_userinfo, text)
    for value in sorted(secrets(), key=len, reverse=True):  # the longest first: one secret may hold another
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_obj(obj):
    """A copy of nested dicts / lists / tuples with every string (and every key) redacted; a number that is a
    secret becomes the masked string."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {redact(k) if isinstance(k, str) else k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    if isinstance(obj, int | float) and not isinstance(obj, bool) and str(obj) in secrets():
        return MASK
    return obj


def redact_yaml(text: str) -> str:
    """YAML text redacted as data, so that it still parses (`name: ***` would be a YAML alias); unchanged
    when it holds no secret, redacted as plain text when it is not YAML."""
    if redact(text) == text:
        return text
    import yaml

    from hipporag.core import safe_yaml

    try:  # no aliases: a file's alias bomb would be expanded on disk by the dump
        return yaml.safe_dump(redact_obj(safe_yaml.load(text)), sort_keys=False, allow_unicode=True, width=120)
    except yaml.YAMLError:
        return redact(text)


def redact_file(path: Path) -> bool:
    """Rewrite a file the harness or Hydra wrote with its secrets redacted (YAML and JSON as data, so that
    they still parse; anything else as text). True when it changed; a missing file is left alone."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if redact(text) == text:
        return False
    if path.suffix in (".yaml", ".yml"):
        new = redact_yaml(text)
    elif path.suffix == ".json":
        try:
            new = json.dumps(redact_obj(json.loads(text)), indent=1) + "\n"
        except ValueError:
            new = redact(text)
    else:
        new = redact(text)
    tmp = path.with_name(f".{path.name}.redact.tmp")
    tmp.write_text(new, encoding="utf-8")  # a plain open(): the mode the umask gives, as the original had
    os.replace(tmp, path)
    return True


@contextlib.contextmanager
def redacted_argv():
    """sys.argv redacted while a library records it (W&B's run metadata holds the command line)."""
    saved = sys.argv
    sys.argv = [redact(a) for a in saved]
    try:
        yield
    finally:
        sys.argv = saved


class RedactingFilter:
    """A logging filter for handlers: each record's message (and traceback text) leaves redacted."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            import logging

            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install_log_filter(logger=None) -> None:
    """Put one RedactingFilter on every handler of `logger` (the root logger: Hydra's console and run.log)."""
    import logging

    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


HYDRA_FILES = ("config.yaml", "overrides.yaml", "hydra.yaml")  # what Hydra saves in a run's .hydra/


def protect_run(cfg, run_dir: Path) -> None:
    """At a run's start: register the config's secrets, mask them in the log handlers (run.log, the console)
    and in the files Hydra already wrote (`.hydra/*.yaml`; an unresolved `${oc.env:X}` there is no secret)."""
    register_config(cfg)
    install_log_filter()
    for name in HYDRA_FILES:
        redact_file(Path(run_dir) / ".hydra" / name)
