"""The pretrained encoder as a SavedModel that serves token ids and raw text.

Signatures:
  serving_default(input_word_ids, input_mask, input_type_ids)  int32 [batch, length]
      -> sequence_output [batch, length, hidden], pooled_output [batch, hidden]  (float32)
  serve_text(text)  string [batch]
      -> the same two outputs, plus the packed input_word_ids / input_mask / input_type_ids.

`serve_text` runs tensorflow-text's `BertTokenizer` over the training vocabulary (stored in
the SavedModel as an asset) inside the graph and packs `[CLS] text [SEP]` to the training
`seq_length` (longer texts are cut), exactly as the pretraining data was tokenized. Loading
needs the tensorflow-text ops registered: `import tensorflow_text` before
`tf.saved_model.load(path)`.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from recipes.bert import vocabulary
from recipes.bert.model import ENCODER_INPUTS
from recipes.common import export as export_common

TEXT_SIGNATURE = "serve_text"


class BertEncoderExport(tf.Module):
    """The encoder plus the in-graph tokenizer; `signatures()` gives what is saved."""

    def __init__(self, encoder, vocab_file, seq_length):
        super().__init__(name="bert_encoder_export")
        self.encoder = encoder
        self.tokenizer = vocabulary.make_tokenizer(vocab_file)
        ids = vocabulary.special_ids(vocabulary.read_vocabulary(vocab_file))
        self._cls_id, self._sep_id, self._pad_id = ids.cls, ids.sep, ids.pad
        self._seq_length = seq_length

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name=name)
                                  for name in ENCODER_INPUTS])
    def encode(self, input_word_ids, input_mask, input_type_ids):
        outputs = self.encoder(
            dict(input_word_ids=input_word_ids, input_mask=input_mask,
                 input_type_ids=input_type_ids),
            training=False,
        )
        # float32 out whatever the training policy (bfloat16 on TPU).
        return {
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def encode_text(self, text):
        pieces = self.tokenizer.tokenize(text).merge_dims(-2, -1)  # [batch, (word pieces)]
        pieces = pieces[:, : self._seq_length - 2]  # room for [CLS] and [SEP]
        segments, type_ids = tf_text.combine_segments(
            [pieces], start_of_sequence_id=self._cls_id, end_of_segment_id=self._sep_id
        )
        word_ids, mask = tf_text.pad_model_inputs(
            segments, max_seq_length=self._seq_length, pad_value=self._pad_id
        )
        type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length=self._seq_length)
        inputs = {
            "input_word_ids": tf.cast(word_ids, tf.int32),
            "input_mask": tf.cast(mask, tf.int32),
            "input_type_ids": tf.cast(type_ids, tf.int32),
        }
        return {**self.encode(**inputs), **inputs}

    def signatures(self):
        return {
            "serving_default": self.encode.get_concrete_function(),
            TEXT_SIGNATURE: self.encode_text.get_concrete_function(),
        }


def export_encoder(export_dir, encoder, vocab_file, seq_length):
    """Writes the SavedModel atomically (complete or absent) to `export_dir`."""
    module = BertEncoderExport(encoder, vocab_file, seq_length)
    return export_common.export_saved_model(export_dir, module, signatures=module.signatures())
