"""Fine-tuned models as SavedModels that take raw strings.

Classification, `serving_default(sentence)` or `(sentence1, sentence2)`, string [batch]
  -> label (string [batch]), label_id (int32 [batch]), probabilities (float32 [batch, C]).
  Packing is `classification.TextPacker`, the one training used.

Question answering, `serving_default(question, context)`, string [batch]
  -> answer (string [batch]: a span of `context`), start / end (byte offsets in context).
  The decoding is `squad_lib.postprocess_output`'s rule for one window, in the graph:
  among the `n_best_size` best start and the `n_best_size` best end positions, the pair
  with the highest start + end logit such that both lie in the context, start <= end and
  the span has at most `max_answer_length` pieces; the answer is the context text the
  pieces cover (tensorflow-text word-piece offsets). The question is cut to
  `max_query_length` pieces and the context to what fits in `seq_length` after it: this
  serving model reads one window. On questions whose context fits in one window it gives
  the answers that evaluation scored (a test checks this); evaluation itself reads long
  contexts in several windows `doc_stride` apart.

Loading needs the tensorflow-text ops: `import tensorflow_text` before
`tf.saved_model.load(path)`.
"""

import tensorflow as tf

from recipes.bert.classification import TextPacker


class ClassifierServing(tf.Module):
    def __init__(self, model, vocab_file, seq_length, labels, pairs):
        super().__init__(name="classifier_serving")
        self.model = model
        self.packer = TextPacker(vocab_file, seq_length)
        self.labels = tf.constant(list(labels))
        self.pairs = pairs

    def _classify(self, first, second=None):
        logits = self.model(self.packer(first, second), training=False)["logits"]
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"label": tf.gather(self.labels, label_id), "label_id": label_id,
                "probabilities": tf.nn.softmax(logits)}

    def signatures(self):
        text = lambda name: tf.TensorSpec([None], tf.string, name=name)
        if self.pairs:
            function = tf.function(lambda sentence1, sentence2: self._classify(sentence1, sentence2),
                                   input_signature=[text("sentence1"), text("sentence2")])
        else:
            function = tf.function(lambda sentence: self._classify(sentence),
                                   input_signature=[text("sentence")])
        return {"serving_default": function.get_concrete_function()}


class QuestionAnsweringServing(tf.Module):
    def __init__(self, model, vocab_file, seq_length, max_query_length, n_best_size,
                 max_answer_length):
        super().__init__(name="question_answering_serving")
        self.model = model
        self.packer = TextPacker(vocab_file, seq_length)
        self.seq_length = seq_length
        self.max_query_length = max_query_length
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                  tf.TensorSpec([None], tf.string, name="context")])
    def answer(self, question, context):
        query = self.packer.word_pieces(question)[:, : self.max_query_length]
        pieces, starts, ends = self.packer.tokenizer.tokenize_with_offsets(context)
        pieces, starts, ends = (t.merge_dims(-2, -1) for t in (pieces, starts, ends))
        # [CLS] query [SEP] context [SEP]: the context keeps what fits.
        query_length = query.row_lengths()
        room = self.seq_length - 3 - query_length
        keep = tf.ragged.range(pieces.row_lengths()) < tf.expand_dims(room, 1)
        pieces, starts, ends = (tf.ragged.boolean_mask(t, keep) for t in (pieces, starts, ends))
        outputs = self.model(self.packer.pack([query, pieces]), training=False)
        start_logits, end_logits = outputs["start_logits"], outputs["end_logits"]

        first = tf.expand_dims(query_length + 2, 1)  # position of the first context piece
        position = tf.range(self.seq_length, dtype=tf.int64)[tf.newaxis, :]
        in_context = (position >= first) & (position < first + tf.expand_dims(
            pieces.row_lengths(), 1))
        top = min(self.n_best_size, self.seq_length)
        start_ok = in_context & (start_logits >= tf.math.top_k(start_logits, top).values[:, -1:])
        end_ok = in_context & (end_logits >= tf.math.top_k(end_logits, top).values[:, -1:])
        length = position[:, tf.newaxis, :] - position[:, :, tf.newaxis] + 1  # [1, start, end]
        valid = (start_ok[:, :, tf.newaxis] & end_ok[:, tf.newaxis, :]
                 & (length >= 1) & (length <= self.max_answer_length))
        scores = start_logits[:, :, tf.newaxis] + end_logits[:, tf.newaxis, :]
        scores = tf.where(valid, scores, tf.fill(tf.shape(scores), float("-inf")))
        best = tf.argmax(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=-1)
        best_start = best // self.seq_length - (first[:, 0])
        best_end = best % self.seq_length - (first[:, 0])
        found = tf.reduce_any(tf.reshape(valid, [tf.shape(valid)[0], -1]), axis=-1)
        dense = lambda t: t.to_tensor(shape=[None, self.seq_length])  # never empty
        byte_start = tf.gather(dense(starts), tf.maximum(best_start, 0), batch_dims=1)
        byte_end = tf.gather(dense(ends), tf.maximum(best_end, 0), batch_dims=1)
        byte_start = tf.where(found, byte_start, 0)
        byte_end = tf.where(found, byte_end, 0)
        return {"answer": tf.strings.substr(context, byte_start, byte_end - byte_start),
                "start": byte_start, "end": byte_end}

    def signatures(self):
        return {"serving_default": self.answer.get_concrete_function()}
