"""Strict recipe configs: unknown keys and wrong types are one-line errors naming the key."""

import dataclasses
import glob
import os
import types
from typing import Optional

import pytest

from recipes.common import config as config_lib
from recipes.common import schema
from recipes.common.config import load_config, format_config, parse_params_override
from recipes.common.errors import UserError


@dataclasses.dataclass
class _Train:
    steps: int = 10
    learning_rate: float = 0.1
    jit_compile: bool = False
    patterns: list[str] = dataclasses.field(default_factory=list)
    end_learning_rate: Optional[float] = None


@dataclasses.dataclass
class _Schema:
    name: str = "tiny"
    train: _Train = dataclasses.field(default_factory=_Train)


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_files_layer_in_order_then_override_wins(tmp_path):
    first = _write(tmp_path, "a.yaml", "train:\n  steps: 5\n  learning_rate: 2\n")
    second = _write(tmp_path, "b.yaml", "train:\n  steps: 7\n")
    config = load_config(_Schema, [first, second], "train.patterns=[bias, 'a,b']")
    assert config.train.steps == 7
    assert config.train.learning_rate == 2.0 and isinstance(config.train.learning_rate, float)
    assert config.train.patterns == ["bias", "a,b"]
    assert config.name == "tiny"


@pytest.mark.parametrize("override", ["train.steps: 40", "{train.steps: 40, name: base}"])
def test_a_dotted_key_in_the_yaml_form_says_a_yaml_key_is_a_section(override):
    """`--params_override='train.steps: 40'` was "unknown config key 'train.steps'; did you
    mean train?", of a key that exists."""
    with pytest.raises(UserError) as error:
        load_config(_Schema, [], override)
    assert str(error.value) == (
        "--params_override: 'train.steps' is a dotted key in the YAML form, where each key is "
        "one section; write train.steps=40 or {train: {steps: 40}}")


def test_a_dotted_key_whose_yaml_value_is_a_date_says_so_without_a_traceback():
    """YAML reads 2024-01-01 as a datetime.date, which json.dumps raised a TypeError on."""
    with pytest.raises(UserError) as error:
        load_config(_Schema, [], "train.steps: 2024-01-01")
    assert str(error.value) == (
        "--params_override: 'train.steps' is a dotted key in the YAML form, where each key is "
        "one section; write train.steps=\"2024-01-01\" or {train: {steps: \"2024-01-01\"}}")


def test_dotted_keys_in_a_file_say_a_yaml_key_is_a_section_not_another_program(tmp_path):
    dotted = _write(tmp_path, "dotted.yaml", "train.steps: 40\ntrain.learning_rate: 0.5\n")
    with pytest.raises(UserError) as error:
        load_config(_Schema, [dotted])
    assert str(error.value) == (
        f"{dotted}: config key 'train.steps' is written dotted; in YAML each key is one "
        "section: write {train: {steps: 40}} (or 'train:' with the rest indented under it)")


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("train.stepz=5", "unknown config key 'train.stepz'; did you mean train.steps? "
                          "known keys under train: end_learning_rate, jit_compile,"),
        ("trian.steps=5", "unknown config key 'trian'; did you mean train? known keys: "),
        # a key without its section (was: only the sections listed)
        ("steps=5", "unknown config key 'steps'; did you mean train.steps? known keys: name, "
                    "train"),
        ("train.zzz=5", "unknown config key 'train.zzz'; known keys under train: "),
        ("train.steps=abc", "'train.steps' must be int, got 'abc'"),
        ("train.steps=2.5", "'train.steps' must be int, got 2.5"),
        ("train.jit_compile=1", "'train.jit_compile' must be bool"),
        ("train.patterns=bias", "'train.patterns' must be a list of str"),
        ("train=3", "'train' must be a mapping"),
        ("train.steps", "is neither `key.path=value,...`"),
        ("train.steps=1,=2", "is not `key.path=value`"),
        ("train.patterns=bias,LayerNorm", "--params_override item 'LayerNorm' is not "
         "`key.path=value`; separate items with commas, e.g. train.steps=100,optimizer.name=lars;"
         " if train.patterns is a list, write it in brackets: train.patterns=[bias,LayerNorm]"),
        ("train.end_learning_rate=None", "config key 'train.end_learning_rate' got the string "
                                         "'None'; write null for no value"),
        ("train.steps=4,train.steps=0", "--params_override sets 'train.steps' twice; give each "
                                        "key once"),
        ("train.patterns.x=1,train.patterns=[a]", "--params_override sets 'train.patterns' and "
                                                  "keys below it; give each key once"),
        ("{train: {[steps]: 3}}", "a key must be a name, not the list ['steps']"),
    ],
)
def test_bad_override_is_one_line_naming_the_key(override, fragment):
    with pytest.raises(UserError) as error:
        load_config(_Schema, [], override)
    assert fragment in str(error.value)
    assert "\n" not in str(error.value)


@dataclasses.dataclass
class _Eval:
    steps: int = 0


@dataclasses.dataclass
class _TwoSections:
    train: _Train = dataclasses.field(default_factory=_Train)
    eval: _Eval = dataclasses.field(default_factory=_Eval)


def test_a_key_without_its_section_names_every_section_that_has_it(tmp_path):
    flat = _write(tmp_path, "flat.yaml", "steps: 3\n")
    with pytest.raises(UserError) as error:
        load_config(_TwoSections, [flat])
    assert str(error.value) == (f"{flat}: unknown config key 'steps'; did you mean train.steps "
                                "or eval.steps? known keys: eval, train")


def test_a_number_for_a_string_key_says_how_to_quote_it_and_the_quoted_one_loads():
    with pytest.raises(UserError, match=r"'name' must be str, got 3 \(int\); quote it to "
                                        "give the string: '3'$"):
        load_config(_Schema, [], "name=3")
    assert load_config(_Schema, [], "name='3'").name == "3"


@dataclasses.dataclass
class _WithTrain:
    train: schema.TrainConfig = dataclasses.field(default_factory=schema.TrainConfig)


def test_an_empty_value_for_a_string_key_says_how_to_write_the_empty_string(tmp_path):
    # `key=` and `key:` are YAML's null: "must be str, got None" said nothing of ''
    with pytest.raises(UserError) as raised:
        load_config(_Schema, [], "name=")
    assert str(raised.value) == ("--params_override: config key 'name' must be str, got None "
                                 "(NoneType); write name='' for an empty string")
    assert load_config(_Schema, [], "name=''").name == ""
    with pytest.raises(UserError) as raised:  # a nested key: its whole name, as overrides take it
        load_config(_WithTrain, [], "train.init_checkpoint=")
    assert str(raised.value).endswith("; write train.init_checkpoint='' for an empty string")
    in_file = _write(tmp_path, "null.yaml", "train:\n  init_checkpoint:\n")
    with pytest.raises(UserError) as raised:  # in a file: YAML's own spelling
        load_config(_WithTrain, [in_file])
    assert str(raised.value) == (
        f"{in_file}: config key 'train.init_checkpoint' must be str, got None (NoneType); "
        "write init_checkpoint: '' for an empty string")


def test_bad_file_errors_name_the_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_config(_Schema, [str(tmp_path / "missing.yaml")])
    broken = _write(tmp_path, "broken.yaml", "train: [1, 2\n")
    with pytest.raises(UserError, match="broken.yaml"):
        load_config(_Schema, [broken])
    unknown = _write(tmp_path, "unknown.yaml", "train:\n  warmup: 3\n")
    with pytest.raises(UserError, match=r"unknown.yaml: unknown config key 'train.warmup'"):
        load_config(_Schema, [unknown])


@pytest.mark.parametrize("text", ["", "\n# train:\n#   steps: 3\n"])
def test_a_config_file_without_keys_is_refused_not_read_as_the_defaults(tmp_path, text):
    empty = _write(tmp_path, "empty.yaml", text)
    with pytest.raises(UserError) as error:
        load_config(_Schema, [empty])
    assert str(error.value) == (f"{empty}: holds no config keys (the file is empty or all "
                                "comments); give the keys to set, or leave the file out for "
                                "the defaults")


@pytest.mark.parametrize("quote", ["'", '"'])
def test_quotes_that_reached_the_override_are_named(quote):
    """A script's argument list keeps the quotes a shell would take off: the key read
    `'train`, refused as an unknown key with `did you mean train?`."""
    with pytest.raises(UserError) as error:
        parse_params_override(f"{quote}train.steps=4{quote}")
    assert str(error.value) == (
        f"--params_override={quote}train.steps=4{quote}: the quotes around it reached the "
        "program (a shell takes them off; a list of arguments in a script or YAML file does "
        "not); drop them: --params_override=train.steps=4")


@pytest.mark.parametrize("text, kind", [("- train\n- steps: 3\n", "list"), ("3\n", "int")])
def test_a_config_file_that_is_not_a_mapping_says_how_one_is_written(tmp_path, text, kind):
    listed = _write(tmp_path, "listed.yaml", text)
    with pytest.raises(UserError) as error:
        load_config(_Schema, [listed])
    assert str(error.value) == (f"config file {listed!r} must hold a YAML mapping at the top "
                                f"level, not a {kind}: write `section:` lines with `key: value` "
                                "lines indented under them (--help_config lists them)")


def test_one_unknown_key_is_named_without_guessing_at_another_program(tmp_path):
    typo = _write(tmp_path, "typo.yaml", "train:\n  stepz: 3\n")
    with pytest.raises(UserError) as error:
        load_config(_Schema, [typo])
    assert "another program" not in str(error.value)


@pytest.mark.parametrize("keys, named", [
    (["stepz", "warmupp"], "(train.stepz, train.warmupp)"),
    (["a1", "a2", "a3", "a4"], "(train.a1, train.a2, train.a3, ...)"),
])
def test_two_or_more_unknown_keys_ask_whether_it_is_another_programs_config(
        tmp_path, keys, named):
    config = _write(tmp_path, "other.yaml", "train:\n" + "".join(f"  {k}: 3\n" for k in keys))
    with pytest.raises(UserError) as error:
        load_config(_Schema, [config])
    message = str(error.value)
    assert message.startswith(f"{config}: unknown config key 'train.{keys[0]}'")
    assert (f"; {len(keys)} of its keys are unknown here {named}: is it another program's "
            "config? --help_config lists this program's keys") in message


@pytest.mark.parametrize("config_file, schema_module, schema_name", [
    ("configs/resnet/tiny_cpu.yaml", "recipes.bert.config", "BertPretrainingConfig"),
    ("configs/bert/tiny_cpu.yaml", "recipes.resnet.config", "ResNetConfig"),
])
def test_another_programs_config_is_named_as_such(config_file, schema_module, schema_name):
    import importlib
    import os

    from conftest import REPO_ROOT

    schema_cls = getattr(importlib.import_module(schema_module), schema_name)
    with pytest.raises(UserError) as error:
        load_config(schema_cls, [os.path.join(REPO_ROOT, config_file)])
    message = str(error.value)
    assert "unknown config key" in message and "\n" not in message
    assert "is it another program's config? --help_config lists this program's keys" in message


def test_resolved_config_round_trips_through_its_yaml(tmp_path):
    config = load_config(_Schema, [], "train.steps=3,train.end_learning_rate=0")
    saved = _write(tmp_path, "resolved.yaml", format_config(config))
    assert load_config(_Schema, [saved]) == config


def test_yaml_mapping_override_is_accepted():
    assert parse_params_override("{train: {steps: 4}}") == {"train": {"steps": 4}}


@pytest.mark.parametrize(
    "train, message",
    [
        ({"steps_per_execution": 2, "checkpoint_every": 5, "steps": 10},
         "train.checkpoint_every=5 is not a multiple of train.steps_per_execution=2 "
         "(Keras calls back once per 2 updates); use train.checkpoint_every=4 or 6, or "
         "another steps_per_execution"),
        ({"steps_per_execution": 4, "checkpoint_every": 8, "log_every": 2},
         "train.log_every=2 is not a multiple of train.steps_per_execution=4 (Keras calls "
         "back once per 4 updates); use train.log_every=4, or another steps_per_execution"),
        ({"steps_per_execution": 3, "checkpoint_every": 6, "log_every": 7, "steps": 12},
         "train.log_every=7 is not a multiple of train.steps_per_execution=3 (Keras calls "
         "back once per 3 updates); use train.log_every=6 or 9, or another "
         "steps_per_execution"),
        ({"steps": 3, "checkpoint_every": 5},
         "train.steps=3 is not a multiple of train.checkpoint_every=5; use train.steps=5, "
         "or another checkpoint_every"),
    ],
)
def test_steps_off_a_chunk_or_a_call_are_refused_with_the_nearest_multiples(train, message):
    config = _shared_sections(schema.TrainConfig(**{"steps": 8, **train}))
    with pytest.raises(UserError) as error:
        schema.check(config)
    assert str(error.value) == message


@pytest.mark.parametrize("steps_per_execution, checkpoint_every, log_every",
                         [(1, 5, 3), (2, 4, 2), (4, 8, 8), (3, 12, 6)])
def test_callback_steps_on_the_calls_of_steps_per_execution_pass(steps_per_execution,
                                                                 checkpoint_every, log_every):
    schema.check(_shared_sections(schema.TrainConfig(
        steps=2 * checkpoint_every, checkpoint_every=checkpoint_every, log_every=log_every,
        steps_per_execution=steps_per_execution)))


def _shared_sections(train):
    """A config with the sections every recipe's schema holds (what `schema.check` reads)."""
    return types.SimpleNamespace(train=train, optimizer=schema.OptimizerConfig(),
                                 eval=schema.EvalConfig(), runtime=schema.RuntimeConfig())


@pytest.mark.parametrize("key, value, message", [
    ("exclude_from_weight_decay", ["bias", "layer_norm("],
     "optimizer.exclude_from_weight_decay holds an invalid regular expression 'layer_norm(': "
     "missing )"),
    ("exclude_from_layer_adaptation", ["("],
     "optimizer.exclude_from_layer_adaptation holds an invalid regular expression '('"),
    ("beta_1", 1.0, "optimizer.beta_1 must be in [0, 1), got 1.0"),
    ("beta_2", -0.1, "optimizer.beta_2 must be in [0, 1), got -0.1"),
    ("epsilon", 0.0, "optimizer.epsilon must be > 0, got 0.0"),
    ("decay_power", -1.0, "optimizer.decay_power must be > 0, got -1.0"),
    ("momentum", -0.9, "optimizer.momentum must be in [0, 1], got -0.9"),
    ("momentum", 1.5, "optimizer.momentum must be in [0, 1], got 1.5"),  # as Keras' SGD
    ("eeta", float("inf"), "optimizer.eeta must be finite, got inf"),
    ("global_clipnorm", float("nan"), "optimizer.global_clipnorm=nan must be a positive number"),
    ("global_clipnorm", float("inf"), "optimizer.global_clipnorm=inf must be a positive number"),
    ("global_clipnorm", 0.0, "optimizer.global_clipnorm=0.0 must be a positive number"),
])
def test_optimizer_values_the_library_refuses_are_refused_with_the_config(key, value, message):
    config = _shared_sections(schema.TrainConfig())
    schema.check(config)
    setattr(config.optimizer, key, value)
    with pytest.raises(UserError) as error:
        schema.check(config)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("section, key, value, message", [
    ("eval", "global_batch_size", 0, "eval.global_batch_size=0 must be positive"),
    # alone: it was said together with a valid eval.global_batch_size ("must be positive and")
    ("eval", "steps", -1, "eval.steps=-1 must be at least 0 (0 = the whole held-out set)"),
    ("optimizer", "warmup_steps", 10, "optimizer.warmup_steps=10 must be at least 0 and less "
                                      "than train.steps=10"),  # warmup == steps: no decay
    ("optimizer", "learning_rate", float("inf"), "optimizer.learning_rate=inf must be a finite "
                                                 "number >= 0"),
    ("optimizer", "end_learning_rate", float("inf"), "optimizer.end_learning_rate=inf must be"),
    ("optimizer", "weight_decay_rate", float("inf"), "optimizer.weight_decay_rate=inf must be"),
    ("train", "steps", schema.MAX_STEPS + 1, "train.steps=9223372036854775808 is more than"),
])
def test_shared_values_past_their_bound_are_refused(section, key, value, message):
    config = _shared_sections(schema.TrainConfig(steps=10, checkpoint_every=10))
    schema.check(config)
    setattr(getattr(config, section), key, value)
    with pytest.raises(UserError) as error:
        schema.check(config)
    assert str(error.value).startswith(message)


def test_shared_values_at_their_bound_are_accepted():
    """A constant rate (end == peak) and the largest step count the counter holds."""
    config = _shared_sections(schema.TrainConfig())
    config.optimizer.learning_rate = config.optimizer.end_learning_rate = 0.01
    schema.check(config)
    config.train.steps = config.train.checkpoint_every = schema.MAX_STEPS
    schema.check(config)


@pytest.mark.parametrize("override, message", [
    ("train.steps=true", "'train.steps' must be int, got True (bool)"),
    ("train.learning_rate=true", "'train.learning_rate' must be float, got True (bool)"),
])
def test_a_bool_for_a_number_key_is_refused_not_taken_as_1(override, message):
    with pytest.raises(UserError) as error:
        load_config(_Schema, [], override)
    assert message in str(error.value)


def test_each_changed_config_is_kept_and_an_unchanged_one_is_not(tmp_path):
    """A resumed run's config.yaml history: config.<n>.yaml for each earlier config that
    differs from the new one, none for a resume with the same config."""
    from recipes.common.config import save_config

    model_dir = str(tmp_path)
    save_config(_Schema(), model_dir)
    save_config(_Schema(), model_dir)  # the same config: nothing kept
    assert sorted(os.listdir(model_dir)) == ["config.yaml"]
    for steps in (11, 12, 13):
        save_config(_Schema(train=_Train(steps=steps)), model_dir)
    assert sorted(os.listdir(model_dir)) == [
        "config.1.yaml", "config.2.yaml", "config.3.yaml", "config.yaml"]
    kept = [load_config(_Schema, [os.path.join(model_dir, f"config.{n}.yaml")], "").train.steps
            for n in (1, 2, 3)]
    assert kept == [10, 11, 12]
    assert load_config(_Schema, [os.path.join(model_dir, "config.yaml")], "").train.steps == 13


@pytest.mark.parametrize("changes, message", [
    ({"num_layers": 0}, "model.num_layers=0 must be positive"),
    ({"intermediate_size": -1}, "model.intermediate_size=-1 must be positive"),
    ({"initializer_range": float("nan")}, "model.initializer_range=nan must be positive"),
    ({"attention_dropout_rate": 1.0}, "model.attention_dropout_rate=1.0 must be at least 0 "
                                      "and below 1"),
    ({"hidden_size": 64, "num_attention_heads": 3},
     "model.hidden_size=64 is not a multiple of model.num_attention_heads=3: each head takes "
     "hidden_size / num_attention_heads dimensions (BERT-Base: 768 / 12)"),
])
def test_bert_model_values_its_encoder_cannot_build_are_refused(changes, message):
    from recipes.bert import config as bert_config
    from recipes.bert import model as bert_model

    bert_model.check_model_config(bert_config.ModelConfig(hidden_size=64, num_attention_heads=4))
    with pytest.raises(UserError) as error:
        bert_model.check_model_config(dataclasses.replace(
            bert_config.ModelConfig(hidden_size=64, num_attention_heads=4), **changes))
    assert str(error.value) == message


@pytest.mark.parametrize("changes, message", [
    ({"depth": 7}, "model.depth=7 is not a Model Garden ResNet; use one of [10, 18, 26"),
    ({"depth_multiplier": 0.0}, "model.depth_multiplier=0.0 must be positive"),
    ({"norm_epsilon": -1e-5}, "model.norm_epsilon=-1e-05 must be positive"),
    ({"norm_momentum": 1.5}, "model.norm_momentum=1.5 must be in [0, 1]"),
    ({"dropout_rate": -0.1}, "model.dropout_rate=-0.1 must be at least 0 and below 1"),
])
def test_resnet_model_values_its_backbone_cannot_build_are_refused(changes, message):
    from recipes.resnet import config as resnet_config
    from recipes.resnet import model as resnet_model

    resnet_model.check_model_config(resnet_config.ModelConfig())
    with pytest.raises(UserError) as error:
        resnet_model.check_model_config(
            dataclasses.replace(resnet_config.ModelConfig(), **changes))
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("recipe, override, message", [
    ("resnet", "data.image_size=0", "data.image_size=0 must be positive"),
    ("resnet", "data.shuffle_buffer_size=-1", "data.shuffle_buffer_size=-1 must be positive"),
    ("resnet", "data.crop_area_min=1.5", "data.crop_area_min=1.5 must be above 0 and at most 1"),
    ("resnet", "data.center_crop_fraction=0",
     "data.center_crop_fraction=0.0 must be above 0 and at most 1"),
    ("resnet", "data.eval_num_examples=-5",
     "data.eval_num_examples=-5 must be the number of held-out examples, or 0 to count them"),
    ("resnet", "train.label_smoothing=1",
     "train.label_smoothing=1.0 must be at least 0 and below 1"),
    # BERT's data values are the ones its preparation (recipes/bert/prepare_data.py) refuses
    ("bert", "data.seq_length=4",
     "data.seq_length=4: expected an int >= 5 ([CLS] A [SEP] B [SEP])"),
    ("bert", "data.max_predictions_per_seq=65",
     "data.max_predictions_per_seq=65: expected an int in [1, seq_length=64]"),
    ("bert", "data.dupe_factor=0", "data.dupe_factor=0: expected an int >= 1"),
    ("bert", "data.vocab_size=0", "data.vocab_size=0: expected an int > 5 (its 5 reserved "
     "tokens and a word piece at least)"),
])
def test_data_values_the_pipeline_cannot_use_are_refused_by_check_config(
        recipe, override, message):
    from recipes.bert import pretrain
    from recipes.resnet import train as resnet_train

    task_class = {"bert": pretrain.BertPretraining,
                  "resnet": resnet_train.ResNetClassification}[recipe]
    task_class(load_config(task_class.config_class, [], "")).check_config()
    with pytest.raises(UserError) as error:
        task_class(load_config(task_class.config_class, [], override)).check_config()
    assert str(error.value) == message


@pytest.mark.parametrize("written", ["1e-3", "1E-3", "+1e-3", "10e-4", "1.e-3"])
def test_a_float_in_exponent_form_without_a_dot_is_a_float(tmp_path, written):
    """YAML 1.2 reads `1e-3` as a number; PyYAML (YAML 1.1) gave the string '1e-3'."""
    path = _write(tmp_path, "a.yaml", f"train:\n  learning_rate: {written}\n")
    assert load_config(_Schema, [path], "").train.learning_rate == pytest.approx(1e-3)
    override = load_config(_Schema, [], f"train.learning_rate={written}")
    assert override.train.learning_rate == pytest.approx(1e-3)
    with pytest.raises(UserError, match="must be float, got '1e-3'"):
        load_config(_Schema, [], "train.learning_rate='1e-3'")  # quoted: a string still


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfetrain:\n")
    with pytest.raises(UserError, match=r"binary.yaml' is not UTF-8 text \(invalid start byte "
                                        r"at byte 0\); give a YAML file"):
        load_config(_Schema, [str(path)], "")


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_tensorflow_cannot_take_is_refused_with_the_config(seed):
    config = _shared_sections(schema.TrainConfig(seed=seed))
    with pytest.raises(UserError, match=rf"train.seed={seed} must be from 0 to 2\*\*32 - 1"):
        schema.check(config)


def test_a_section_with_its_keys_not_indented_says_so(tmp_path):
    path = _write(tmp_path, "flat.yaml", "train:\nsteps: 4\n")
    with pytest.raises(UserError, match=r"flat.yaml: config section 'train' is empty; indent "
                                        r"its keys under it \(e.g. 'train:' then '  steps: "):
        load_config(_Schema, [path], "")
    with pytest.raises(UserError, match="config key 'train' must be a mapping of its keys"):
        load_config(_Schema, [_write(tmp_path, "list.yaml", "train: [1, 2]\n")], "")


def test_a_key_that_is_a_list_in_a_file_is_one_line(tmp_path):
    path = _write(tmp_path, "listkey.yaml", "train:\n  ? [steps, x]\n  : 3\n")
    with pytest.raises(UserError, match=r"listkey.yaml: a key must be a name, not the list "
                                        r"\['steps', 'x'\] at line 2"):
        load_config(_Schema, [path], "")


def test_a_key_given_twice_in_a_file_is_refused_not_silently_overwritten(tmp_path):
    path = _write(tmp_path, "twice.yaml", "train:\n  steps: 4\n  steps: 5\n")
    with pytest.raises(UserError, match=r"twice.yaml: the key 'steps' is given twice in one "
                                        r"mapping at line 3, column 3; fix the YAML syntax"):
        load_config(_Schema, [path], "")


@pytest.mark.parametrize("fraction, message", [
    # 0 would convert no held-out split at all, for the evaluation to read
    ("0", "data.digits_validation_fraction=0.0 must be above 0 and below 1: the share of the "
          "embedded digits held out for the evaluation; give e.g. 0.2"),
    ("1.5", "data.digits_validation_fraction=1.5 must be above 0 and below 1: the share of "
            "the embedded digits held out for the evaluation; give e.g. 0.2"),
    ("0.0005", "data.digits_validation_fraction=0.0005 holds out 0 of the 500 embedded digits "
               "of each class, leaving no held-out digit; give e.g. 0.2"),
    ("0.9995", "data.digits_validation_fraction=0.9995 holds out 500 of the 500 embedded "
               "digits of each class, leaving no training digit; give e.g. 0.2"),
])
def test_a_digits_split_without_held_out_or_training_digits_is_refused_by_check_config(
        fraction, message):
    from recipes.resnet import train as resnet_train

    task_class = resnet_train.ResNetClassification
    digits = "data.embedded_digits=true,data.num_classes=10,data.label_offset=1"
    for good in ("0.2", "0.002", "0.998"):
        task_class(load_config(task_class.config_class, [],
                               f"{digits},data.digits_validation_fraction={good}")).check_config()
    # the file patterns are used instead: the fraction is not read
    task_class(load_config(task_class.config_class, [],
                           f"data.digits_validation_fraction={fraction}")).check_config()
    with pytest.raises(UserError) as error:
        task_class(load_config(task_class.config_class, [],
                               f"{digits},data.digits_validation_fraction={fraction}")
                   ).check_config()
    assert str(error.value) == message


_SHIPPED = [(recipe, path) for recipe in ("bert", "resnet")
            for path in sorted(glob.glob(os.path.join(
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", recipe,
                "*.yaml")))
            if not os.path.basename(path).startswith("finetune")]


@pytest.mark.parametrize("recipe, path", _SHIPPED, ids=[os.path.basename(p) for _, p in _SHIPPED])
def test_every_shipped_config_passes_its_recipes_check(recipe, path):
    """Values at their bounds included: BERT-Large phase 2's data.seq_length equals its
    model.max_sequence_length (512), a masked position per token is allowed."""
    from recipes.bert import pretrain
    from recipes.resnet import train as resnet_train

    task_class = {"bert": pretrain.BertPretraining,
                  "resnet": resnet_train.ResNetClassification}[recipe]
    task_class(load_config(task_class.config_class, [path], "")).check_config()
    if recipe == "bert":
        at_bound = "data.seq_length=16,data.max_predictions_per_seq=16"
        task_class(load_config(task_class.config_class, [path], at_bound)).check_config()


def test_a_config_write_that_fails_half_way_leaves_config_yaml_whole(tmp_path, monkeypatch):
    """config.yaml is written beside itself and renamed into place: a write stopped half
    way (a full disk, a kill) leaves the one a resume reads as it was."""
    import io

    from recipes.common import storage
    from recipes.common.config import save_config

    save_config(_Schema(), str(tmp_path))
    before = (tmp_path / "config.yaml").read_text()

    class HalfWritten(io.TextIOWrapper):
        def write(self, text):
            super().write(text[:len(text) // 2])
            self.flush()
            raise OSError("No space left on device")

    def half_writing_open(path, mode="r", **kwargs):
        return HalfWritten(open(path, mode.replace("b", "") + "b"), **kwargs)

    monkeypatch.setattr(storage, "open", half_writing_open, raising=False)
    with pytest.raises(OSError, match="No space left"):
        save_config(_Schema(train=_Train(steps=11)), str(tmp_path))
    assert (tmp_path / "config.yaml").read_text() == before


def test_a_config_file_given_as_a_file_url_is_read(tmp_path):
    """A run into --model_dir=file:///... wrote its config.yaml, then every resume and
    evaluation read it back with open('file:///...'): 'its config.yaml is damaged (... does
    not exist)'."""
    path = _write(tmp_path, "run.yaml", "train:\n  steps: 7\n")
    assert load_config(_Schema, [f"file://{path}"]).train.steps == 7


@pytest.mark.parametrize("eval_batch, replicas", [(3, 2), (6, 4), (1, 2)])
def test_an_eval_batch_off_a_multiple_of_the_replicas_is_refused(eval_batch, replicas):
    """A held-out batch of 3 on 2 replicas was evaluated as 2 a step, without a word."""
    from recipes.common import driver

    config = types.SimpleNamespace(
        train=types.SimpleNamespace(global_batch_size=8 * replicas, micro_batch_size=8),
        eval=types.SimpleNamespace(global_batch_size=eval_batch))
    with pytest.raises(UserError) as raised:
        driver.plan_batch(config, replicas)
    assert str(raised.value) == (f"eval.global_batch_size={eval_batch} is not a multiple of the "
                                 f"{replicas} replicas")
    config.eval.global_batch_size = 2 * replicas  # a multiple: planned
    assert driver.plan_batch(config, replicas).num_replicas == replicas


@pytest.mark.parametrize("key, old, new, same", [
    ("encoder.pretraining_dir", "runs/a", os.path.abspath("runs/a"), True),  # a run saved so
    ("data.train_file", "runs/../t.tsv", "t.tsv", True),
    ("data.train_file", "runs/a", "runs/b", False),
    ("data.data_dir", "gs://b/runs/a", "gs://b/runs/a/", False),  # not a local path: as given
    ("data.data_dir", "", os.path.abspath(""), False),  # "" is <model_dir>/data, not "."
    ("optimizer.name", "lamb", os.path.abspath("lamb"), False)])  # not a path key
def test_a_saved_path_spelled_otherwise_is_no_change(key, old, new, same):
    """A run saved with a relative path, resumed with the same path made absolute, was
    refused as if another directory were given (a key the run keeps)."""
    from recipes.bert import config as bert_config, finetune_config

    schema_cls = (bert_config.BertPretrainingConfig if key == "data.data_dir"
                  else finetune_config.BertFinetuneConfig)
    assert config_lib.same_local_path(schema_cls, key, old, new) is same


def test_help_config_names_optional_and_list_types_in_words():
    """--help_config gave `Optional` for optimizer.exclude_from_weight_decay (a list of
    patterns, or null) and optimizer.global_clipnorm (a number, or null)."""
    from recipes.common import config_help  # pylint: disable=import-outside-toplevel

    assert config_lib.type_name(Optional[list[str]]) == "list of str or null"
    assert config_lib.type_name(Optional[float]) == "float or null"
    assert config_lib.type_name(int | str) == "int or str"
    assert config_lib.type_name(list) == "list" and config_lib.type_name(bool) == "bool"
    kinds = {key: type_name for key, type_name, *_ in
             config_help.config_keys(schema.OptimizerConfig(), "optimizer.")}
    assert kinds["optimizer.exclude_from_weight_decay"] == "list of str or null"
    assert kinds["optimizer.global_clipnorm"] == "float or null"
    assert kinds["optimizer.learning_rate"] == "float"
