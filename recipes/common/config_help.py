"""`--help_config`: every config key of a recipe, with its type, default and meaning.

Generated from the recipe's schema (`Task.config_class`), so it cannot drift from what the
config loader accepts: the keys and types are the dataclass fields, the defaults are the
schema's own, and the meaning is the comment written above each field in the schema.
"""

import dataclasses
import inspect
import re
import typing

from recipes.common import config as config_lib

_FIELD = re.compile(r"(\w+)\s*:")


def field_comments(schema_cls):
    """{field name: the comment lines written just above it in the class body, joined};
    a field a subclass inherits keeps its base class' comment."""
    comments = {}
    for cls in reversed(schema_cls.__mro__[:-1]):  # bases first, so subclasses win
        comments.update(_own_field_comments(cls))
    return comments


def _own_field_comments(schema_cls):
    try:
        lines, _ = inspect.getsourcelines(schema_cls)
    except (OSError, TypeError):
        return {}
    comments, pending = {}, []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(stripped)
        if match and pending:
            comments[match.group(1)] = " ".join(pending)
        elif match and "#" in stripped:  # a comment at the end of the field's line
            comments[match.group(1)] = stripped.split("#", 1)[1].strip()
        pending = []
    return comments


def config_keys(config, prefix=""):
    """(dotted key, type name, default, meaning) of every leaf of a schema instance."""
    schema_cls = type(config)
    hints = typing.get_type_hints(schema_cls)
    comments = field_comments(schema_cls)
    rows = []
    for field in dataclasses.fields(schema_cls):
        value = getattr(config, field.name)
        dotted = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            rows.extend(config_keys(value, f"{dotted}."))
            continue
        rows.append((dotted, config_lib.type_name(hints[field.name]), value,
                     comments.get(field.name, "")))
    return rows


def format_config_help(schema_cls, program):
    """The text `--help_config` prints for a recipe whose schema is `schema_cls`."""
    rows = config_keys(schema_cls())
    width = max(len(key) for key, *_ in rows)
    type_width = max(len(type_name) for _, type_name, *_ in rows)
    lines = [f"Config keys of {program} (YAML sections, or --params_override=key=value,...):",
             ""]
    for key, type_name, default, meaning in rows:
        lines.append(f"{key:<{width}}  {type_name:<{type_width}}  default {default!r}")
        if meaning:
            lines.append(f"{'':<{width}}  {meaning}")
    return "\n".join(lines)


def config_key_given_as_flag(argument, schema_cls):
    """The words of a one-line error for an unknown flag `argument` that names config keys
    of `schema_cls` (`--train.steps=10`, `--steps=10`, `--learning_rate=0.1`: a whole key,
    a key's last part, or the end of one such as `batch_size`): how to set them. None when
    it names none."""
    name, _, value = argument.lstrip("-").partition("=")
    matches = name and config_lib.keys_named(name, schema_cls)
    if not matches:
        return None
    others = f" (or {', '.join(matches[1:])})" if matches[1:] else ""
    return (f"--{name} is not a flag of this program; config keys are set with "
            f"--params_override: --params_override={matches[0]}={value or 'VALUE'}{others}; "
            "--help_config lists them")
