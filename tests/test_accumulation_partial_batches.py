"""A batch that does not split into k micro-batches, in both flavours' accumulation models:
arrays given to `fit` are checked before any training (one ValueError naming the sizes and
the fix); a dataset's batches, whose size is known only when the step runs, fail at that
batch with the same sizes named, not with a bare reshape error.
"""
import numpy as np
import pytest
import tensorflow as tf

from flavours import FLAVOURS


def _accumulation_model(flavour_name, k):
    flavour = FLAVOURS[flavour_name]()
    keras = flavour.keras
    if flavour_name == "tf_keras":
        from lamb_tf.accumulation import GradientAccumulationModel
    else:
        from lamb_tf.keras3_accumulation import GradientAccumulationModel
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    wrapper = GradientAccumulationModel(model, k)
    wrapper.compile(optimizer=flavour.module.LAMB(0.01), loss="mse")
    return wrapper, model


def _arrays(examples):
    return np.ones((examples, 4), np.float32), np.ones((examples, 1), np.float32)


def _refusal_before_training(flavour_name, examples, **fit_arguments):
    """The ValueError's message of `fit` on `examples` arrays with k = 4, checked to come
    before any step."""
    wrapper, model = _accumulation_model(flavour_name, 4)
    before = [np.array(w) for w in model.get_weights()]
    with pytest.raises(ValueError) as error:
        wrapper.fit(*_arrays(examples), verbose=0, **fit_arguments)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)  # no step ran
    return str(error.value)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("examples,batch_size,expected", [
    (70, 16, "x holds 70 examples, so with batch_size=16 the last, partial batch has 6, which "
             "does not split into 1 replica(s) x accumulation_steps=4 micro-batches: give "
             "x[:64] (whole batches only)"),
    (64, 18, "with batch_size=18 each batch has 18, which does not split into 1 replica(s) x "
             "accumulation_steps=4 micro-batches: give a batch_size that 4 divides"),
    # Keras' default 32: fewer examples make one batch, and a batch_size k divides is no fix
    (30, None, "x holds 30 examples, so with batch_size=32 the only batch has 30, which does "
               "not split into 1 replica(s) x accumulation_steps=4 micro-batches: give x a "
               "number of examples that 4 divides"),
])
def test_arrays_that_leave_a_batch_k_does_not_divide_are_refused_before_training(
        flavour_name, examples, batch_size, expected):
    assert expected in _refusal_before_training(flavour_name, examples, batch_size=batch_size,
                                                epochs=1)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_arrays_of_whole_batches_train(flavour_name):
    wrapper, model = _accumulation_model(flavour_name, 4)
    before = [np.array(w) for w in model.get_weights()]
    wrapper.fit(*_arrays(72), batch_size=16, epochs=1, verbose=0)  # last batch: 8 = 2 x 4
    assert int(np.asarray(wrapper.optimizer.iterations)) == 5
    assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_validation_split_is_checked_on_the_examples_it_leaves_to_train(flavour_name):
    message = _refusal_before_training(  # Keras trains on the first 63 of 70
        flavour_name, 70, batch_size=16, validation_split=0.1, epochs=1)
    assert ("x holds 70 examples, validation_split=0.1 leaves 63 to train, so with "
            "batch_size=16 the last, partial batch has 15, which does not split into 1 "
            "replica(s) x accumulation_steps=4 micro-batches: give x of whole batches and "
            "validation_data=(x_val, y_val) instead of validation_split") in message
    # 70 without the split would be refused (last batch 6); 20% held out leaves 56 = 3 x 16 + 8
    wrapper, _ = _accumulation_model(flavour_name, 4)
    history = wrapper.fit(*_arrays(70), batch_size=16, validation_split=0.2, epochs=1,
                          verbose=0)
    assert int(np.asarray(wrapper.optimizer.iterations)) == 4
    assert "val_loss" in history.history


@pytest.mark.parametrize("flavour_name", FLAVOURS)
@pytest.mark.parametrize("batch_size,steps_per_epoch,epochs,expected", [
    # 70 = 4 x 16 + 6: both flavours go on into the next pass, so step 5 is the partial 6
    (16, 3, 2, "x holds 70 examples and steps_per_epoch=3 runs 6 steps, the passes over x "
               "one after another, so with batch_size=16 the last, partial batch has 6, which "
               "does not split into 1 replica(s) x accumulation_steps=4 micro-batches: give "
               "x[:64] (whole batches only)"),
    # no batch_size: Keras takes ceil(70 / 3) = 24, and 70 = 2 x 24 + 22
    (None, 3, 1, "so with batch_size=24 the last, partial batch has 22"),
    (None, 5, 1, "so with batch_size=14 each batch has 14"),
])
def test_steps_per_epoch_that_reach_a_batch_k_does_not_divide_are_refused_before_training(
        flavour_name, batch_size, steps_per_epoch, epochs, expected):
    assert expected in _refusal_before_training(flavour_name, 70, batch_size=batch_size,
                                                steps_per_epoch=steps_per_epoch, epochs=epochs)


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_steps_per_epoch_that_end_before_the_partial_batch_train(flavour_name):
    wrapper, _ = _accumulation_model(flavour_name, 4)
    wrapper.fit(*_arrays(70), batch_size=16, steps_per_epoch=2, epochs=2, verbose=0)
    assert int(np.asarray(wrapper.optimizer.iterations)) == 4  # the 4 whole batches of 16


@pytest.mark.parametrize("flavour_name", FLAVOURS)
def test_a_dataset_batch_k_does_not_divide_names_the_sizes(flavour_name):
    wrapper, _ = _accumulation_model(flavour_name, 4)
    dataset = tf.data.Dataset.from_tensor_slices(_arrays(70)).batch(16)  # last batch: 6
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"a batch of\] \[6\] \[examples does not split into "
                             r"accumulation_steps=4 micro-batches.*drop_remainder=True"):
        wrapper.fit(dataset, epochs=1, verbose=0)
