"""In a process that has imported `lamb_tf`, both Keras flavours find LAMB, LARS and the
schedules by their registered name (`lamb_tf>LAMB`, ...) without `custom_objects`:
`serialize`/`deserialize`/`get`, tf_keras' legacy format, `.keras` files, and (Keras 3)
pickle. The names are namespaced, so Keras' own `Lamb` is untouched.
"""
import pickle

import numpy as np
import pytest

import lamb_tf  # noqa: F401  (the import that registers)
from flavours import FLAVOURS
from lamb_tf import schedules

ARGS = {"LAMB": dict(learning_rate=0.02, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"],
                     phi_bounds=(0.0, 10.0)),
        "LARS": dict(learning_rate=0.3, momentum=0.8, eeta=0.002, nesterov=True)}
CASES = [(flavour, name) for flavour in FLAVOURS for name in ARGS]


@pytest.mark.parametrize("flavour_name,optimizer_name", CASES)
def test_serialize_deserialize_and_get_give_our_class_back(flavour_name, optimizer_name):
    flavour = FLAVOURS[flavour_name]()
    optimizer_class = getattr(flavour.module, optimizer_name)
    optimizer = optimizer_class(**ARGS[optimizer_name])
    serialized = flavour.keras.optimizers.serialize(optimizer)
    assert serialized["registered_name"] == f"lamb_tf>{optimizer_name}"
    for rebuilt in (flavour.keras.optimizers.deserialize(serialized),
                    flavour.keras.optimizers.get(serialized)):
        assert type(rebuilt) is optimizer_class
        assert rebuilt.get_config() == optimizer.get_config()


@pytest.mark.parametrize("optimizer_name", list(ARGS))
def test_tf_keras_legacy_format_round_trip(optimizer_name):
    flavour = FLAVOURS["tf_keras"]()
    optimizer = getattr(flavour.module, optimizer_name)(**ARGS[optimizer_name])
    serialized = flavour.keras.optimizers.serialize(optimizer, use_legacy_format=True)
    rebuilt = flavour.keras.optimizers.deserialize(serialized, use_legacy_format=True)
    assert type(rebuilt) is type(optimizer)
    assert rebuilt.get_config() == optimizer.get_config()


@pytest.mark.parametrize("optimizer_name", list(ARGS))
def test_keras3_pickle_round_trip(optimizer_name):
    optimizer = getattr(FLAVOURS["keras3"]().module, optimizer_name)(**ARGS[optimizer_name])
    rebuilt = pickle.loads(pickle.dumps(optimizer))
    assert type(rebuilt) is type(optimizer)
    assert rebuilt.get_config() == optimizer.get_config()


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_keras_file_with_our_optimizer_and_schedule_loads_without_custom_objects(flavour_name, tmp_path):
    flavour = FLAVOURS[flavour_name]()
    keras = flavour.keras
    schedule_class = (schedules.TfKerasWarmupPolynomialDecay if flavour_name == "tf_keras"
                      else schedules.Keras3WarmupPolynomialDecay)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="out")])
    model.compile(optimizer=flavour.module.LAMB(schedule_class(0.1, 10, warmup_steps=2)), loss="mse")
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    model.fit(x, y, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert type(loaded.optimizer) is flavour.module.LAMB
    assert type(loaded.optimizer._learning_rate) is schedule_class
    assert loaded.optimizer.get_config() == model.optimizer.get_config()


@pytest.mark.parametrize("optimizer_name", list(ARGS))
@pytest.mark.parametrize("schedule_name", ["WarmupPolynomialDecay", "MixedBatchSchedule"])
def test_tf_keras_h5_file_with_our_optimizer_and_schedule_loads_without_custom_objects(
        optimizer_name, schedule_name, tmp_path):
    # tf_keras' `.h5` loader looks a schedule up by its bare class name, not by the name
    # it is registered under
    keras = FLAVOURS["tf_keras"]().keras
    schedule = (schedules.TfKerasWarmupPolynomialDecay(0.1, 10, warmup_steps=2)
                if schedule_name == "WarmupPolynomialDecay" else
                schedules.TfKerasMixedBatchSchedule(
                    schedules.TfKerasWarmupPolynomialDecay(0.1, 2, warmup_steps=1),
                    schedules.TfKerasWarmupPolynomialDecay(0.05, 8, warmup_steps=2)))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="out")])
    optimizer = getattr(lamb_tf.tf_keras_optimizers, optimizer_name)(learning_rate=schedule)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), verbose=0, epochs=3)
    model.save(tmp_path / "model.h5")
    loaded = keras.models.load_model(tmp_path / "model.h5")
    assert type(loaded.optimizer) is type(optimizer)
    assert type(loaded.optimizer._learning_rate) is type(schedule)
    assert loaded.optimizer.get_config() == optimizer.get_config()
    assert int(loaded.optimizer.iterations) == 3


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_names_are_namespaced_so_keras_own_lamb_is_untouched(flavour_name):
    flavour = FLAVOURS[flavour_name]()
    saving = flavour.keras.saving
    assert saving.get_registered_name(flavour.module.LAMB) == "lamb_tf>LAMB"
    assert saving.get_registered_object("lamb_tf>LAMB") is flavour.module.LAMB
    for bare in ("LAMB", "Lamb", "lamb"):
        assert saving.get_registered_object(bare) is None
