"""Reading what settings come from: settings files, secrets' files, the environment's
values (`environment_values`) and its variables that are probably typos. No settings
model here (`monitor/settings.py` holds it)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import AliasChoices
from pydantic.fields import FieldInfo

from monitor.ingest.contract import KNOWN_REASONS

__all__ = ["OTHER_VARIABLES", "SECRETS", "NoDecode", "SettingsError", "environment_values",
           "problem", "read_file", "read_secret", "warnings_of", "yaml_problem"]


# The settings whose values are never shown (each may also come from `<name>_file`).
SECRETS = ("sasl_password", "ssl_password")


class SettingsError(ValueError):
    """Configuration that cannot work; the message names the setting and its value."""


class NoDecode:
    """Marks a setting whose environment value is not JSON (`a,b,c`, split by its validator)."""


def environment_values(fields: Mapping[str, FieldInfo], environ: Mapping[str, str]
                       ) -> dict[str, Any]:
    """The settings `environ` gives, by the name the model takes each under:
    `RAGMON_<NAME>` in any case, or the names of a field's `AliasChoices`; maps and lists
    as JSON unless `NoDecode` (a value that is not JSON is a `SettingsError` naming it)."""
    env = {name.lower(): value for name, value in environ.items()}
    found: dict[str, Any] = {}
    for name, field in fields.items():
        alias = field.validation_alias
        names = ([choice.lower() for choice in alias.choices if isinstance(choice, str)]
                 if isinstance(alias, AliasChoices) else [f"ragmon_{name}"])
        present = [env_name for env_name in names if env_name in env]
        if not present:
            continue
        value: Any = env[present[0]]
        if (get_origin(field.annotation) in (dict, list, tuple, set, frozenset)
                and NoDecode not in field.metadata):
            try:
                value = json.loads(value)
            except ValueError:
                raise SettingsError(f"invalid ragmon settings: {present[0].upper()}={value!r} "
                                    f"is not JSON (setting {name})") from None
        found[names[0] if isinstance(alias, AliasChoices) else name] = value
    return found


# RAGMON_* variables that are not settings: read where they bite.
OTHER_VARIABLES = frozenset({
    "RAGMON_CONFIG",              # the settings file (settings.load)
    "RAGMON_CALIBRATION_CACHE",   # detect/thresholds.py
    "RAGMON_REQUIRE_COMPILED",    # aggregate/compiled.py
    "RAGMON_CARRIED_COUNTERS",    # worker/stall.py (set by the worker for itself)
})


def warnings_of(settings: Any, environ: Any) -> list[str]:
    """What in the environment or the settings probably is not what the user meant."""
    fields = {f"RAGMON_{name.upper()}" for name in type(settings).model_fields}
    known = fields | OTHER_VARIABLES
    found = []
    for name in sorted(environ):
        if name.upper().startswith("RAGMON_") and name.upper() not in known:
            close = get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            found.append(f"{name} is not a ragmon setting and is ignored{hint}")
    missing = [code for code in KNOWN_REASONS if code not in settings.reasons]
    if missing:
        found.append(f"reasons={','.join(settings.reasons)} leaves out the contract's "
                     f"{', '.join(missing)}: traces giving them are counted as `other`")
    if not settings.slice_dimensions:
        found.append("slice_dimensions is empty: only release totals are kept, no slices")
    return found


def read_secret(name: str, path: str) -> str:
    """A secret's file, read: its text without the trailing newline an editor or
    `kubectl create secret --from-file` leaves. The error names the file, never its text."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise ValueError(f"{name}={path!r}: cannot read it: {why}") from None
    text = text.rstrip("\r\n")
    if not text:
        raise ValueError(f"{name}={path!r}: the file is empty")
    return text


def read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {str(path)!r}: {exc.strerror}") from None
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise SettingsError(f"settings file {str(path)!r}: the name must end in "
                            f"{', '.join(sorted(_READERS))} (the format goes by extension)")
    try:
        data = reader(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"settings file {str(path)!r} is not valid: "
                            f"{yaml_problem(exc)}") from None
    except ValueError as exc:
        raise SettingsError(f"settings file {str(path)!r} is not valid: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {str(path)!r} must hold a table/object")
    return data


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line, without the snippet PyYAML quotes: that line of the file
    may hold a secret (a password, a key)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "not YAML"
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


_READERS = {".toml": tomllib.loads, ".json": json.loads,
            ".yaml": yaml.safe_load, ".yml": yaml.safe_load}


def problem(err: Any, names: Iterable[str]) -> str:
    """One validation error as `name=value: why`; never the value of a secret, and a
    check across settings (no single name) only by its message, which names them. An
    unknown name gets the closest valid one."""
    name = ".".join(str(p) for p in err["loc"])
    if not name:
        return str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        close = get_close_matches(name, sorted(names), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"{name}: not a ragmon setting{hint}"
    shown = "<secret>" if name in SECRETS else repr(err.get("input"))
    return f"{name}={shown}: {err['msg']}"
