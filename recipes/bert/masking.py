"""Masked-LM masking with tensorflow-text's ops, as BERT's "Masking Procedure".

Per sequence: of the tokens that are not [CLS], [SEP] or [PAD], select
`min(ceil(masked_lm_prob * n), max_predictions_per_seq)` at random
(`tensorflow_text.RandomItemSelector`); each selected token becomes [MASK] with
probability 0.8, a random vocabulary id with probability 0.1, and stays unchanged with
probability 0.1 (a `tensorflow_text.MaskValuesChooser`); `tensorflow_text.mask_language_model`
applies both. The labels are the original ids at the selected positions.

One small difference from Google's `create_pretraining_data.py`, from the library: the
count rounds up (`ceil`, computed in float32, so at exact multiples such as n = 20 or 100
it gives one more: float32(0.15) is 0.15000000596) where Google rounds to nearest with a
minimum of 1. The random replacement is drawn over the whole vocabulary, reserved tokens
included, as in Google's.

Reproducibility: tensorflow-text's default randomness is TF's stateful random ops seeded
from the global seed; measured here, two processes with the same seeds gave different masks
(stateful kernels inside `tf.function`s are not reproducible across traces). So all draws
are *stateless*, from `(seed, call number)`: the selector gets a stateless `shuffle_fn`
(its documented hook), and the values chooser is a subclass whose only change is where its
uniform numbers come from.
"""

import functools

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from recipes.bert.vocabulary import SpecialIds

MASK_TOKEN_RATE = 0.8  # BERT paper, section 3.1 / appendix A.1: 80% [MASK],
RANDOM_TOKEN_RATE = 0.1  # 10% a random token, (and the remaining 10% unchanged).


class _StatelessMaskValuesChooser(tf_text.MaskValuesChooser):
    """`MaskValuesChooser.get_mask_values` with the same rule, from stateless draws.

    Hand-written because the library's chooser has no hook for its random source.
    """

    def __init__(self, vocab_size, mask_token, seed):
        super().__init__(
            vocab_size,
            mask_token,
            mask_token_rate=MASK_TOKEN_RATE,
            random_token_rate=RANDOM_TOKEN_RATE,
        )
        self._seed = seed  # A [2] int64 tensor, new for every call.

    def get_mask_values(self, masked_lm_ids):
        flat_ids = masked_lm_ids.flat_values
        kind_seed, id_seed = tf.unstack(tf.random.experimental.stateless_split(self._seed, 2))
        # u ~ U[0, 1) decides per selected token: [MASK], random id, or unchanged.
        u = tf.random.stateless_uniform(tf.shape(flat_ids), seed=kind_seed)
        random_ids = tf.random.stateless_uniform(
            tf.shape(flat_ids), seed=id_seed, minval=0, maxval=self.vocab_size, dtype=flat_ids.dtype
        )
        use_mask = u < MASK_TOKEN_RATE  # 80%: [MASK]
        use_random = (u >= MASK_TOKEN_RATE) & (u < MASK_TOKEN_RATE + RANDOM_TOKEN_RATE)  # 10%
        values = tf.where(
            use_mask,
            tf.cast(self.mask_token, flat_ids.dtype),
            tf.where(use_random, random_ids, flat_ids),
        )  # else 10%: unchanged
        return masked_lm_ids.with_flat_values(values)


@functools.lru_cache(maxsize=None)
def _masking_function(
    vocab_size: int, special_ids: SpecialIds, masked_lm_prob: float, max_predictions_per_seq: int
):
    """The traced masking graph; the seed is an input, so one trace serves every seed."""
    unselectable_ids = [special_ids.cls, special_ids.sep, special_ids.pad]

    @tf.function(
        input_signature=[tf.RaggedTensorSpec([None, None], tf.int64), tf.TensorSpec([2], tf.int64)]
    )
    def mask(token_ids, call_seed):
        shuffle_seed, values_seed = tf.unstack(tf.random.experimental.stateless_split(call_seed, 2))

        def shuffle_row(positions):
            # Rows hold disjoint, increasing flat positions, so the row's largest position
            # gives each row of the batch its own seed.
            row_seed = tf.random.experimental.stateless_fold_in(
                shuffle_seed, tf.reduce_max(positions)
            )
            return tf.random.experimental.stateless_shuffle(positions, seed=row_seed)

        selector = tf_text.RandomItemSelector(
            max_selections_per_batch=max_predictions_per_seq,  # Applied per sequence (row).
            selection_rate=masked_lm_prob,
            unselectable_ids=unselectable_ids,
            shuffle_fn=shuffle_row,
        )
        chooser = _StatelessMaskValuesChooser(vocab_size, special_ids.mask, values_seed)
        return tf_text.mask_language_model(token_ids, selector, chooser)

    return mask


class Masker:
    """Masks batches of variable-length sequences of token ids, reproducibly from `seed`."""

    def __init__(
        self,
        *,
        vocab_size: int,
        special_ids: SpecialIds,
        masked_lm_prob: float,
        max_predictions_per_seq: int,
        seed: int
    ):
        self._mask = _masking_function(
            vocab_size, special_ids, masked_lm_prob, max_predictions_per_seq
        )
        self._seed = seed
        self._num_calls = 0

    def __call__(self, sequences):
        """Masks a list of id lists.

        Returns (masked_ids, positions, original_ids): lists of NumPy int64 arrays, one per
        sequence; positions are ascending.
        """
        lengths = np.array([len(s) for s in sequences], np.int64)
        flat = np.fromiter((t for s in sequences for t in s), np.int64, int(lengths.sum()))
        ragged = tf.RaggedTensor.from_row_lengths(flat, lengths)
        call_seed = tf.constant([self._seed, self._num_calls], tf.int64)
        self._num_calls += 1
        masked_ids, positions, original_ids = self._mask(ragged, call_seed)
        return tuple(_rows(r) for r in (masked_ids, positions, original_ids))


def _rows(ragged):
    """A ragged [batch, (n)] tensor as a list of NumPy rows."""
    values = ragged.flat_values.numpy()
    splits = ragged.row_splits.numpy()
    return [values[splits[i] : splits[i + 1]] for i in range(len(splits) - 1)]
