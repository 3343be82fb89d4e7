"""Strict YAML configs over plain dataclass schemas.

A recipe describes its config as nested `@dataclasses.dataclass` classes whose fields are
`int`, `float`, `bool`, `str`, `Optional[...]` of those, `list[...]` of those, or another
such dataclass. `load_config` starts from the schema's defaults, merges the YAML files in
order, then `--params_override`; every key is checked against the schema as it arrives, so
an unknown key or a wrong type is a `UserError` that names the dotted key and its source.

Why not Model Garden's `hyperparams.Config`: its `override(..., is_strict=True)` rejects
unknown keys but accepts any type (a string lands in an int field), and the error is a
`KeyError` traceback rather than a line the user can act on.
"""

import collections.abc
import dataclasses
import difflib
import json
import os
import re
import types
import typing

import yaml

from recipes.common import errors, storage
from recipes.common.errors import UserError

_SCALARS = (int, float, bool, str)
# The metadata key of a `path_field`: (values that name no path, comma-separated globs?).
_PATH = "recipes.path"


def load_config(schema_cls, config_files=(), params_override="", renamed_keys=None):
    """Returns a `schema_cls` instance: defaults, then each YAML file, then the override.

    `renamed_keys` maps old dotted keys to new ones: an old key is an error naming the new.
    """
    values = dataclasses.asdict(schema_cls())
    renamed = renamed_keys or {}
    for path in config_files:
        updates = _read_yaml_file(path)
        try:
            _merge(values, updates, schema_cls, path, "", renamed)
        except UserError as error:
            keys = set(_dotted_keys(schema_cls))  # (a key of them written dotted: said so)
            unknown = [key for key in unknown_keys(updates, schema_cls) if key not in keys]
            if len(unknown) < 2:  # one key: a typo, which the error names
                raise
            raise UserError(
                f"{error}; {len(unknown)} of its keys are unknown here "
                f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}): is it "
                "another program's config? --help_config lists this program's keys"
            ) from None
    if params_override:
        updates = parse_params_override(params_override)
        _merge(values, updates, schema_cls, "--params_override", "", renamed)
    return _build(schema_cls, values)


def parse_params_override(text):
    """Parses `a.b=1,c.d=[x, y]` (or a YAML/JSON mapping) into a nested dict."""
    text = text.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        raise UserError(  # read as a key `'train` otherwise
            f"--params_override={text}: the quotes around it reached the program (a shell "
            "takes them off; a list of arguments in a script or YAML file does not); drop them: "
            f"--params_override={text[1:-1]}")
    if "=" not in text:
        parsed = _safe_yaml(text, "--params_override")
        if not isinstance(parsed, dict):
            raise UserError(
                f"--params_override={text!r} is neither `key.path=value,...` nor a "
                "YAML mapping; write e.g. --params_override=train.steps=100"
            )
        return parsed
    nested = {}
    previous = None
    for item in _split_top_level_commas(text):
        key, sep, raw_value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            as_list = (f"; if {previous[0]} is a list, write it in brackets: "
                       f"{previous[0]}=[{previous[1]},{item}]"
                       if previous and sep == "" else "")
            raise UserError(
                f"--params_override item {item!r} is not `key.path=value`; "
                f"separate items with commas, e.g. train.steps=100,optimizer.name=lars{as_list}"
            )
        previous = (key, raw_value.strip())
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(
                    f"--params_override sets {key!r} below a key that is already a value"
                )
        if parts[-1] in node:
            what = "and keys below it" if isinstance(node[parts[-1]], dict) else "twice"
            raise UserError(f"--params_override sets {key!r} {what}; give each key once")
        node[parts[-1]] = _safe_yaml(raw_value, f"--params_override {key}")
    return nested


def format_config(config):
    """The resolved config as YAML text, keys in schema order."""
    return yaml.safe_dump(dataclasses.asdict(config), sort_keys=False, default_flow_style=False)


def save_config(config, model_dir):
    """Writes `model_dir/config.yaml` atomically; returns its path. A config.yaml with other
    content is kept first as config.<n>.yaml (n = 1, 2, ...): the history of a resumed run."""
    import tensorflow as tf  # Late import: gs:// paths need tf.io.gfile; loading a config does not.

    tf.io.gfile.makedirs(model_dir)
    path = os.path.join(model_dir, "config.yaml")
    text = format_config(config)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            previous = f.read()
        if previous != text:
            n = 1
            while tf.io.gfile.exists(os.path.join(model_dir, f"config.{n}.yaml")):
                n += 1
            tf.io.gfile.copy(path, os.path.join(model_dir, f"config.{n}.yaml"))
    storage.write_text(path, text)
    return path


def path_field(default="", *, names=(), comma_separated=False):
    """A schema field (a `str`) that holds a path: a local file, directory, glob or
    checkpoint, or a remote one (`gs://`, any `://`). The driver makes a relative local one
    absolute from the current directory before anything reads it or the run's config.yaml
    keeps it (`make_paths_absolute`), so a run is evaluated, exported, resumed or used as an
    init_checkpoint from any directory; a saved one spelled otherwise is no change
    (`same_local_path`); one starting with '~' is refused. `names`: values that name no path,
    kept as given (data.corpus's "stdlib"); `comma_separated`: several paths or globs, joined
    by commas, each made absolute."""
    return dataclasses.field(default=default, metadata={_PATH: (tuple(names), comma_separated)})


def path_keys(schema_cls, prefix=""):
    """{dotted key: (names, comma_separated)} of the `path_field`s of `schema_cls`, its
    sections' too (the shared train.init_checkpoint and export.dir in every recipe)."""
    keys, types_ = {}, schema_fields(schema_cls)
    for field in dataclasses.fields(schema_cls):
        field_type = types_[field.name]
        if dataclasses.is_dataclass(field_type):
            keys.update(path_keys(field_type, f"{prefix}{field.name}."))
        elif _PATH in field.metadata:
            keys[f"{prefix}{field.name}"] = field.metadata[_PATH]
    return keys


def misspelled_name(schema_cls, key, value):
    """The value of the `names` of `schema_cls`'s path key `key` (dotted) that `value`, a
    path that matches nothing, misspells in its last component (difflib's close match, case
    ignored: `stdlibb`, `Stdlib` for data.corpus's "stdlib"), or None: what a "did you mean"
    of the path's error names."""
    names = path_keys(schema_cls).get(key, ((), False))[0]
    last = os.path.basename(os.path.normpath(value)).lower() if isinstance(value, str) else ""
    lowered = {name.lower(): name for name in names}
    close = difflib.get_close_matches(last, list(lowered), n=1, cutoff=0.8) if last else []
    return lowered[close[0]] if close else None


def absolute_path(value, names=(), comma_separated=False):
    """`value` of a path key with its relative local path (each, `comma_separated`) made
    absolute from the current directory (`os.path.abspath`: `a/../b` as `b`, a glob's `*`
    kept); "", a remote path (`gs://`, any `://`) and a value of `names` as given."""
    if not isinstance(value, str) or value in names:
        return value
    parts = value.split(",") if comma_separated else [value]
    return ",".join(
        part if not part.strip() or "://" in part
        else os.path.abspath(part.strip() if comma_separated else part) for part in parts)


def names_relative_path(value, names=(), comma_separated=False):
    """Whether `value` of a path key holds a relative local path (one of its parts,
    `comma_separated`), which `absolute_path` would change."""
    if not isinstance(value, str) or value in names:
        return False
    parts = value.split(",") if comma_separated else [value]
    return any(part.strip() and "://" not in part and not os.path.isabs(part.strip())
               for part in parts)


def section_and_name(config, key):
    """(the section object of `config` holding the dotted `key`, the key's last name)."""
    *sections, name = key.split(".")
    for part in sections:
        config = getattr(config, part)
    return config, name


def relative_paths(config):
    """{dotted key: value} of `config`'s path keys that hold a relative local path."""
    markers = path_keys(type(config))
    values = {key: getattr(*section_and_name(config, key)) for key in markers}
    return {key: value for key, value in values.items()
            if names_relative_path(value, *markers[key])}


def make_paths_absolute(config):
    """Makes the relative local paths of `config`'s path keys (`path_field`) absolute from
    the current directory, in place (`absolute_path`); returns `config`."""
    for key, (names, comma_separated) in path_keys(type(config)).items():
        section, name = section_and_name(config, key)
        setattr(section, name, absolute_path(getattr(section, name), names, comma_separated))
    return config


def same_local_path(schema_cls, key, old, new):
    """Whether `old` and `new`, values of `key` of `schema_cls`, name the same local paths
    from the current directory, spelled differently (relative and absolute, `a/../b` and
    `b`): a run's config.yaml saved by a version that kept relative paths is resumed from
    the directory it started in as if saved absolute."""
    marker = path_keys(schema_cls).get(key)
    return (marker is not None and isinstance(old, str) and isinstance(new, str)
            and bool(old) and bool(new) and old != new
            and absolute_path(old, *marker) == absolute_path(new, *marker))


def changed_keys(old, new, prefix=""):
    """[(dotted key, old value, new value)] where two configs (dataclasses or dicts) differ."""
    old = dataclasses.asdict(old) if dataclasses.is_dataclass(old) else old
    new = dataclasses.asdict(new) if dataclasses.is_dataclass(new) else new
    changes = []
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            changes += changed_keys(old[key], value, f"{prefix}{key}.")
        elif old.get(key) != value:
            changes.append((f"{prefix}{key}", old.get(key), value))
    return changes


def _read_text(path):
    """The text of the file at `path`: local, or remote (gs://: a run's config.yaml on Cloud
    Storage, which the driver reads back to resume, evaluate or export it) through
    TensorFlow's file systems, imported only then (this module is imported before it)."""
    if storage.all_local([path]):  # file:// too: a --model_dir given as a file:// URL
        with open(storage.local_path(path), encoding="utf-8") as f:
            return f.read()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read().decode("utf-8")
    except tf.errors.NotFoundError:
        raise FileNotFoundError(path) from None
    except tf.errors.OpError as error:  # a host not reached, access refused: one line
        unreachable = errors.cloud_storage_problem(error)
        if unreachable:
            raise errors.UnreachableStorage(unreachable) from None
        raise UserError(f"config file {path!r} cannot be read "
                        f"({error.message.splitlines()[0]})") from None


def _read_yaml_file(path):
    try:
        text = _read_text(path)
    except FileNotFoundError:
        raise UserError(
            f"config file {path!r} does not exist; check --config_file "
            "(paths are relative to the current directory)"
        ) from None
    except UnicodeDecodeError as error:
        raise UserError(
            f"config file {path!r} is not UTF-8 text ({error.reason} at byte {error.start}); "
            "give a YAML file"
        ) from None
    except IsADirectoryError:
        raise UserError(
            f"config file {path!r} cannot be read (Is a directory); give a YAML file, such "
            "as one in configs/"
        ) from None
    except OSError as error:
        raise UserError(
            f"config file {path!r} cannot be read ({error.strerror}); check its permissions"
        ) from None
    parsed = _safe_yaml(text, path)
    if parsed is None:  # a mistake (a file truncated, or another one meant), not the defaults
        raise UserError(f"{path}: holds no config keys (the file is empty or all comments); "
                        "give the keys to set, or leave the file out for the defaults")
    if not isinstance(parsed, dict):
        raise UserError(
            f"config file {path!r} must hold a YAML mapping at the top level, "
            f"not a {type(parsed).__name__}: write `section:` lines with `key: value` lines "
            "indented under them (--help_config lists them)"
        )
    return parsed


def yaml_problem(path):
    """Why the config file at `path` is no YAML mapping of keys (empty, not YAML, not a
    mapping, unreadable), in one line, or None; an `UnreachableStorage` is raised."""
    try:
        _read_yaml_file(path)
    except errors.UnreachableStorage:  # no problem of the file's
        raise
    except UserError as error:
        return str(error)
    return None


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that also reads `1e-3` as a float, as YAML 1.2 does (PyYAML
    follows YAML 1.1, whose floats need a dot, `1.0e-3`, and gave the string '1e-3'), and
    refuses a key given twice in one mapping (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # a list key filled in, to name it
            if not isinstance(key, collections.abc.Hashable):
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a name, not the {type(key).__name__} {key!r}",
                    key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _safe_yaml(text, source):
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as error:
        raise UserError(f"{source}: {storage.yaml_error_words(error)}; fix the YAML syntax") \
            from None


def _split_top_level_commas(text):
    items, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    return [item for item in items if item.strip()]


def unknown_keys(updates, schema_cls, prefix=""):
    """The dotted keys of the nested dict `updates` that `schema_cls` does not have."""
    fields = schema_fields(schema_cls)
    unknown = []
    for key, value in updates.items():
        if key not in fields:
            unknown.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(fields[key]) and isinstance(value, dict):
            unknown += unknown_keys(value, fields[key], f"{prefix}{key}.")
    return unknown


def keys_named(name, schema_cls):
    """The dotted keys of `schema_cls` that `name` may mean: the key itself (`train.steps`),
    else the keys it is the last part of (`learning_rate`: optimizer.learning_rate; `steps`:
    train.steps, eval.steps), else those whose last part ends with `_<name>` (`batch_size`):
    a key given without its section, or as a flag."""
    keys = list(_dotted_keys(schema_cls))
    last = {key: key.rsplit(".", 1)[-1] for key in keys}
    return ([key for key in keys if name in (key, last[key])]
            or [key for key in keys if last[key].endswith("_" + name)])


def _dotted_keys(schema_cls, prefix=""):
    for name, field_type in schema_fields(schema_cls).items():
        if dataclasses.is_dataclass(field_type):
            yield from _dotted_keys(field_type, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def schema_fields(schema_cls):
    """{field name: its type} of a schema dataclass, annotations written as text (`from
    __future__ import annotations`) resolved."""
    hints = typing.get_type_hints(schema_cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(schema_cls)}


def _merge(values, updates, schema_cls, source, prefix, renamed):
    """Merges `updates` into the `values` dict of `schema_cls`, checking every key and type."""
    fields = schema_fields(schema_cls)
    for key, value in updates.items():
        dotted = f"{prefix}{key}"
        if key not in fields and dotted in renamed:
            raise UserError(
                f"{source}: config key {dotted!r} is now {renamed[dotted]!r}; rename it"
            )
        if key not in fields and str(key) in set(_dotted_keys(schema_cls)):
            raise UserError(written_dotted(source, dotted, value))
        if key not in fields:
            known = ", ".join(sorted(fields))
            close = [f"{prefix}{name}" for name in difflib.get_close_matches(
                str(key), list(fields), n=1)] or [
                    f"{prefix}{name}" for name in keys_named(str(key), schema_cls)]
            guess = f"did you mean {' or '.join(close)}? " if close else ""
            raise UserError(
                f"{source}: unknown config key {dotted!r}; {guess}"
                f"known keys{' under ' + prefix[:-1] if prefix else ''}: {known}"
            )
        field_type = fields[key]
        if dataclasses.is_dataclass(field_type):
            if value is None:  # `train:` with its keys not indented under it
                raise UserError(
                    f"{source}: config section {dotted!r} is empty; indent its keys under it "
                    f"(e.g. '{dotted}:' then '  {next(iter(schema_fields(field_type)))}: ...'), or "
                    "leave the section out"
                )
            if not isinstance(value, dict):
                raise UserError(
                    f"{source}: config key {dotted!r} must be a mapping of its keys (a "
                    f"section), got {value!r}"
                )
            _merge(values[key], value, field_type, source, f"{dotted}.", renamed)
        else:
            values[key] = _check_type(value, field_type, dotted, source)
            if isinstance(values[key], str) and _PATH in _field(schema_cls, key).metadata:
                storage.refuse_unexpanded_home(f"{source}: config key {dotted}", values[key])


def written_dotted(source, dotted, value):
    """The line for a YAML mapping's key `dotted` that is a dotted key (`train.steps: 40`):
    in YAML each key is one section, in `--params_override`'s `a.b=c` form a dotted path."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)  # a YAML date
    *sections, name = dotted.split(".")
    nested = "".join(f"{{{section}: " for section in sections) + f"{{{name}: {text}}}"
    nested += "}" * len(sections)
    if source == "--params_override":
        return (f"--params_override: {dotted!r} is a dotted key in the YAML form, where each key "
                f"is one section; write {dotted}={text} or {nested}")
    return (f"{source}: config key {dotted!r} is written dotted; in YAML each key is one "
            f"section: write {nested} (or '{sections[0]}:' with the rest indented under it)")


def _field(schema_cls, name):
    """The `dataclasses.Field` called `name` of `schema_cls`."""
    return next(field for field in dataclasses.fields(schema_cls) if field.name == name)


def _check_type(value, field_type, dotted, source):
    """Returns `value` as `field_type` (ints widen to float), or raises a `UserError`."""
    origin = typing.get_origin(field_type)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(field_type)
        if value is None and type(None) in options:
            return None
        if value in ("None", "none") and type(None) in options:
            raise UserError(f"{source}: config key {dotted!r} got the string {value!r}; "
                            "write null for no value")
        (inner,) = [option for option in options if option is not type(None)]
        return _check_type(value, inner, dotted, source)
    if origin is list:
        (item_type,) = typing.get_args(field_type)
        if not isinstance(value, list):
            raise UserError(
                f"{source}: config key {dotted!r} must be a list of "
                f"{item_type.__name__}, got {value!r}; write it as [a, b]"
            )
        return [
            _check_type(item, item_type, f"{dotted}[{i}]", source) for i, item in enumerate(value)
        ]
    if field_type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (
        field_type in _SCALARS
        and isinstance(value, field_type)
        and not (field_type is not bool and isinstance(value, bool))
    ):
        return value
    quote = ("; quote it to give the string: '{}'".format(value)
             if field_type is str and isinstance(value, (bool, int, float)) else "")
    if field_type is str and value is None:  # `key=` and `key:` are YAML's null
        quote = (f"; write {dotted}='' for an empty string" if source == "--params_override"
                 else f"; write {dotted.rsplit('.', 1)[-1]}: '' for an empty string")
    raise UserError(
        f"{source}: config key {dotted!r} must be {type_name(field_type)}, "
        f"got {value!r} ({type(value).__name__}){quote}"
    )


def type_name(field_type):
    """How a schema field's type reads in a message and in --help_config: `float`, `list of
    str`, `float or null` (Optional[float]: null, YAML's None, is allowed)."""
    arguments = typing.get_args(field_type)
    origin = typing.get_origin(field_type)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(argument) for argument in arguments if argument is not type(None)]
        return " or ".join(names + (["null"] if type(None) in arguments else []))
    if origin in (list, tuple) and arguments:
        return f"{origin.__name__} of {type_name(arguments[0])}"
    return getattr(field_type, "__name__", str(field_type).replace("typing.", ""))


def _build(schema_cls, values):
    kwargs = {}
    for name, field_type in schema_fields(schema_cls).items():
        if dataclasses.is_dataclass(field_type):
            kwargs[name] = _build(field_type, values[name])
        else:
            kwargs[name] = values[name]
    return schema_cls(**kwargs)
