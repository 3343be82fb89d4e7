"""get_config/from_config keep every argument (exclusions included); `model.save("x.keras")`
+ load and `tf.train.Checkpoint` save/restore both restore the optimizer's whole state
(step counter, m, v, momentum) and continue training identically (timm-style: N steps,
save, restore into a fresh copy, N more steps on each, equal). One LAMB uses bias
correction and a schedule, so a step counter restored as 0 changes the next steps.
"""
import copy

import numpy as np
import pytest
import tensorflow as tf

from flavours import FLAVOURS, optimizer_state

STEPS = 3

LAMB_ARGS = dict(learning_rate=0.02, beta_1=0.85, beta_2=0.99, epsilon=1e-5, weight_decay_rate=0.01,
                 exclude_from_weight_decay=["layer_norm", "bias"], exclude_from_layer_adaptation=["bias"],
                 name="my_lamb", phi_bounds=(0.01, 10.0), bias_correction=False, global_clipnorm=1.0)
LARS_ARGS = dict(learning_rate=0.3, momentum=0.8, weight_decay_rate=1e-4, eeta=0.002, nesterov=True,
                 classic_momentum=False, exclude_from_weight_decay=["bias"], exclude_from_layer_adaptation=None,
                 name="my_lars", clipnorm=2.0)


def _round_trip_case(flavour, case):
    """(optimizer class, arguments) of a round-trip case in `flavour`."""
    if case == "LAMB_bias_correction_schedule":
        schedule = flavour.polynomial_decay(0.05, 4 * STEPS, 0.001)
        return flavour.module.LAMB, dict(LAMB_ARGS, learning_rate=schedule, bias_correction=True)
    return getattr(flavour.module, case), {"LAMB": LAMB_ARGS, "LARS": LARS_ARGS}[case]


ROUND_TRIP_CASES = ["LAMB", "LAMB_bias_correction_schedule", "LARS"]


def _expected_config(args):
    expected = dict(args)
    if "phi_bounds" in expected:
        expected["phi_bounds"] = list(expected["phi_bounds"])
    return expected


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("optimizer_name,args", [("LAMB", LAMB_ARGS), ("LARS", LARS_ARGS)])
def test_config_round_trip_keeps_every_argument(flavour_name, optimizer_name, args):
    optimizer_class = getattr(FLAVOURS[flavour_name]().module, optimizer_name)
    config = optimizer_class(**args).get_config()
    for key, value in _expected_config(args).items():
        assert config[key] == pytest.approx(value) if isinstance(value, float) else config[key] == value, key
    assert "weight_decay" not in config
    rebuilt = optimizer_class.from_config(copy.deepcopy(config))
    assert rebuilt.get_config() == config


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_config_keeps_an_empty_adaptation_list_apart_from_none(flavour_name):
    """`exclude_from_layer_adaptation=[]` adapts every variable, while None falls back to
    the weight-decay list: the rebuilt optimizer must adapt `dense/bias` in the first case
    and not in the second."""
    flavour = FLAVOURS[flavour_name]()
    for adaptation, bias_adapted in (([], True), (None, False)):
        config = flavour.module.LAMB(
            0.1, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"],
            exclude_from_layer_adaptation=adaptation).get_config()
        assert config["exclude_from_layer_adaptation"] == adaptation
        rebuilt = flavour.module.LAMB.from_config(copy.deepcopy(config))
        rebuilt.build([flavour.variable("dense/kernel", np.ones(3)),
                       flavour.variable("dense/bias", np.ones(3))])
        assert [row.adapted for row in rebuilt.exclusion_table()] == [True, bias_adapted]


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_config_round_trip_with_schedule(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    schedule = flavour.polynomial_decay(0.1, 100, 0.001)
    config = flavour.module.LAMB(learning_rate=schedule).get_config()
    # the Keras base from_config replaces the schedule dict in place: hand it a copy
    rebuilt = flavour.module.LAMB.from_config(copy.deepcopy(config))
    assert rebuilt.get_config() == config
    assert isinstance(rebuilt._learning_rate, type(schedule))
    assert float(rebuilt._learning_rate(50)) == pytest.approx(float(schedule(50)))


def _model(keras):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="hidden"),
                             keras.layers.LayerNormalization(name="layer_norm"), keras.layers.Dense(2, name="out")])


def _batches():
    rng = np.random.default_rng(9)
    return [(rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(4, 2)).astype("float32"))
            for _ in range(2 * STEPS)]


def _train(model, batches):
    for x, y in batches:
        model.train_on_batch(x, y)


def _weights(model):
    return [np.array(w) for w in model.get_weights()]


def _assert_same_state(actual, expected):
    for index, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_array_equal(a, e, err_msg=f"optimizer variable {index}")
    assert len(actual) == len(expected)


@pytest.mark.slow  # saves and loads .keras files, one fit each
@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("case", ROUND_TRIP_CASES)
def test_keras_file_save_load_continues_identically(flavour_name, case, tmp_path):
    flavour = FLAVOURS[flavour_name]()
    optimizer_class, args = _round_trip_case(flavour, case)
    model = _model(flavour.keras)
    model.compile(optimizer=optimizer_class(**args), loss="mse")
    _train(model, _batches()[:STEPS])
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = flavour.keras.models.load_model(path, custom_objects={optimizer_class.__name__: optimizer_class})
    assert isinstance(loaded.optimizer, optimizer_class)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    # the whole state came back: step counter (LAMB's t), m, v, momentum, trust ratios
    assert int(loaded.optimizer.applied_updates.numpy()) == STEPS
    _assert_same_state(optimizer_state(loaded.optimizer), optimizer_state(model.optimizer))
    _train(model, _batches()[STEPS:])
    _train(loaded, _batches()[STEPS:])
    for a, b in zip(_weights(model), _weights(loaded)):
        np.testing.assert_array_equal(a, b)
    _assert_same_state(optimizer_state(loaded.optimizer), optimizer_state(model.optimizer))
    assert int(loaded.optimizer.applied_updates.numpy()) == 2 * STEPS
    # the loaded model's variable paths may carry another model name; compare in order
    assert list(loaded.optimizer.trust_ratios().values()) == list(model.optimizer.trust_ratios().values())


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("case", ROUND_TRIP_CASES)
def test_checkpoint_restore_continues_identically(flavour_name, case, tmp_path):
    flavour = FLAVOURS[flavour_name]()
    optimizer_class, args = _round_trip_case(flavour, case)

    def fresh():
        model = _model(flavour.keras)
        model.compile(optimizer=optimizer_class(**args), loss="mse")
        model.optimizer.build(model.trainable_variables)
        return model

    model = fresh()
    _train(model, _batches()[:STEPS])
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "ckpt"))
    restored = fresh()
    assert not all(np.array_equal(a, b) for a, b in zip(_weights(model), _weights(restored)))
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(path).assert_consumed()
    assert int(restored.optimizer.applied_updates.numpy()) == STEPS
    _assert_same_state(optimizer_state(restored.optimizer), optimizer_state(model.optimizer))
    _train(model, _batches()[STEPS:])
    _train(restored, _batches()[STEPS:])
    for a, b in zip(_weights(model), _weights(restored)):
        np.testing.assert_array_equal(a, b)
    _assert_same_state(optimizer_state(restored.optimizer), optimizer_state(model.optimizer))
    assert int(restored.optimizer.applied_updates.numpy()) == 2 * STEPS
