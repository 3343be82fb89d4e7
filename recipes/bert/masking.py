"""Masked-LM masking with tensorflow-text's ops, as BERT's "Masking Procedure".

Per sequence: of the tokens that are not [CLS], [SEP] or [PAD], select
`min(ceil(masked_lm_prob * n), max_predictions_per_seq)` at random
(`tensorflow_text.RandomItemSelector`); each selected token becomes [MASK] with
probability 0.8, a random vocabulary id with probability 0.1, and stays unchanged with
probability 0.1 (`tensorflow_text.MaskValuesChooser`); `tensorflow_text.mask_language_model`
applies both. The labels are the original ids at the selected positions.

Two small differences from Google's `create_pretraining_data.py`, both from the library:
the count rounds up (`ceil`) where Google rounds to nearest with a minimum of 1, and the
random replacement is drawn over the whole vocabulary (Google also draws from the whole
vocabulary, reserved tokens included, so the two agree there).

Reproducibility: tensorflow-text draws from TF's stateful random ops, seeded from the
graph-level seed. `Masker` traces one `tf.function` whose graph seed is set inside it, so a
given seed and the same sequence of calls give the same masks, in any process, without
touching the caller's global TF seed.
"""
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from recipes.bert.vocabulary import SpecialIds

MASK_TOKEN_RATE = 0.8  # BERT paper, section 3.1 / appendix A.1: 80% [MASK],
RANDOM_TOKEN_RATE = 0.1  # 10% a random token, (and the remaining 10% unchanged).


class Masker:
  """Masks batches of variable-length sequences of token ids."""

  def __init__(self, *, vocab_size: int, special_ids: SpecialIds, masked_lm_prob: float,
               max_predictions_per_seq: int, seed: int):
    selector = tf_text.RandomItemSelector(
        max_selections_per_batch=max_predictions_per_seq,  # Applied per sequence (row).
        selection_rate=masked_lm_prob,
        unselectable_ids=[special_ids.cls, special_ids.sep, special_ids.pad])
    chooser = tf_text.MaskValuesChooser(
        vocab_size, special_ids.mask, mask_token_rate=MASK_TOKEN_RATE,
        random_token_rate=RANDOM_TOKEN_RATE)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
    def mask(token_ids):
      tf.random.set_seed(seed)  # Inside tf.function: the seed of this graph only.
      return tf_text.mask_language_model(token_ids, selector, chooser)

    self._mask = mask

  def __call__(self, sequences):
    """Masks a list of id lists.

    Returns (masked_ids, positions, original_ids): lists of NumPy int64 arrays, one per
    sequence; positions are ascending.
    """
    lengths = np.array([len(s) for s in sequences], np.int64)
    flat = np.fromiter((t for s in sequences for t in s), np.int64, int(lengths.sum()))
    ragged = tf.RaggedTensor.from_row_lengths(flat, lengths)
    masked_ids, positions, original_ids = self._mask(ragged)
    return tuple(_rows(r) for r in (masked_ids, positions, original_ids))


def _rows(ragged):
  """A ragged [batch, (n)] tensor as a list of NumPy rows."""
  values = ragged.flat_values.numpy()
  splits = ragged.row_splits.numpy()
  return [values[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]
