"""Fine-tuned models as SavedModels that take raw strings.

Classification, `serving_default(sentence)` or `(sentence1, sentence2)`, string [batch]
  -> label (string [batch]), label_id (int32 [batch]), probabilities (float32 [batch, C]).
  Packing is `classification.TextPacker`, the one training used.

Question answering, `serving_default(question, context)`, string [batch]
  -> answer (string [batch]: a span of `context`), start / end (byte offsets in context).
  The decoding is evaluation's (`squad.decode`: Model Garden's `squad_lib`), in the graph:
  the question is cut to `max_query_length` pieces; the context is read in windows of what
  fits after it, `doc_stride` pieces apart (`convert_examples_to_features`); in every
  window, among its `n_best_size` best start and `n_best_size` best end positions, a pair
  counts if both lie in the window's context, the start is in its "max context" window,
  start <= end and the span has at most `max_answer_length` pieces; the pair with the
  highest start + end logit over all windows wins, the first one of equal scores in
  `postprocess_output`'s order (`Windows`, `_best_span`). The answer is the context text
  the pieces cover (tensorflow-text's word-piece offsets, which count bytes of the text it
  normalized, mapped back to the context's: `original_byte_offsets`). `postprocess_output`
  maps pieces back through the whitespace-split words, which gives the same text except
  for runs of whitespace inside an answer (it joins words with one space; the official
  metric splits on whitespace, so the scores agree) and text whose lower-casing or accent
  stripping changes its length (its `get_final_text` then falls back to whole words).
  Without any valid span the answer is `squad_lib`'s placeholder "empty" and start = end
  = -1. Written here rather than called because `squad_lib` is Python over NumPy lists,
  which a SavedModel cannot carry; tests/test_finetune_export.py checks it against
  `squad_lib`.

Loading needs the tensorflow-text ops: `import tensorflow_text` before
`tf.saved_model.load(path)`.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from recipes.bert.classification import TextPacker

# What `squad_lib.postprocess_output` answers when no span of any window is valid.
NO_SPAN_ANSWER = "empty"


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
                 max_answer_length, doc_stride):
        super().__init__(name="question_answering_serving")
        self.model = model
        self.packer = TextPacker(vocab_file, seq_length)
        self.seq_length = seq_length
        self.max_query_length = max_query_length
        self.n_best_size = min(n_best_size, seq_length)
        self.max_answer_length = max_answer_length
        self.doc_stride = doc_stride

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                  tf.TensorSpec([None], tf.string, name="context")])
    def answer(self, question, context):
        query = self.packer.word_pieces(question)[:, : self.max_query_length]
        pieces, starts, ends = self.packer.tokenizer.tokenize_with_offsets(context)
        pieces, starts, ends = (t.merge_dims(-2, -1) for t in (pieces, starts, ends))
        windows = Windows(query.row_lengths(), pieces.row_lengths(), self.seq_length,
                          self.doc_stride)
        # One row per window: [CLS] query [SEP] window of the context [SEP].
        piece_index = tf.ragged.range(windows.start, windows.start + windows.length) + \
            tf.gather(pieces.row_starts(), windows.example)[:, tf.newaxis]
        outputs = self.model(self.packer.pack(
            [tf.gather(query, windows.example), tf.gather(pieces.values, piece_index)]),
            training=False)
        window, start, end, found = self._best_span(
            windows, outputs["start_logits"], outputs["end_logits"])
        # The chosen pieces' byte offsets in the context (padded: a batch of empty contexts
        # has no offsets at all).
        piece = lambda position: tf.where(found, pieces.row_starts() + tf.gather(
            windows.start, window) + position - tf.gather(windows.first, window), 0)
        byte_start, byte_end = original_byte_offsets(
            context, tf.gather(tf.concat([starts.values, [0]], 0), piece(start)),
            tf.gather(tf.concat([ends.values, [0]], 0), piece(end)))
        byte_start, byte_end = tf.where(found, byte_start, -1), tf.where(found, byte_end, -1)
        # No valid span in any window: squad_lib's placeholder answer, which is scored.
        answer = tf.where(found, tf.strings.substr(context, tf.maximum(byte_start, 0),
                                                   byte_end - byte_start), NO_SPAN_ANSWER)
        return {"answer": answer, "start": byte_start, "end": byte_end}

    def _best_span(self, windows, start_logits, end_logits):
        """`squad_lib.postprocess_output`'s choice for every example: (its window, start and
        end positions in that window's sequence, whether any span was valid)."""
        n = self.n_best_size
        top_start, top_end = tf.math.top_k(start_logits, n), tf.math.top_k(end_logits, n)
        start_at = tf.cast(top_start.indices, tf.int64)[:, :, tf.newaxis]  # [windows, n, 1]
        end_at = tf.cast(top_end.indices, tf.int64)[:, tf.newaxis, :]  # [windows, 1, n]
        first = windows.first[:, tf.newaxis, tf.newaxis]
        last = first + windows.length[:, tf.newaxis, tf.newaxis] - 1
        is_max_context = tf.gather(windows.max_context(self.seq_length),
                                   tf.cast(top_start.indices, tf.int64), batch_dims=1)
        valid = ((start_at >= first) & (start_at <= last) & (end_at >= first) & (end_at <= last)
                 & is_max_context[:, :, tf.newaxis] & (end_at >= start_at)
                 & (end_at - start_at + 1 <= self.max_answer_length))
        # float64 as the Python floats squad_lib adds; candidates in its order (window, start
        # rank, end rank), the first of equal scores wins as in its stable sort.
        scores = (tf.cast(top_start.values, tf.float64)[:, :, tf.newaxis]
                  + tf.cast(top_end.values, tf.float64)[:, tf.newaxis, :])
        scores = tf.where(valid, scores, float("-inf"))
        scores = tf.RaggedTensor.from_row_lengths(
            tf.reshape(scores, [-1, n * n]), windows.count).to_tensor(float("-inf"))
        scores = tf.reshape(scores, [tf.shape(scores)[0], -1])  # [examples, windows * n * n]
        best = tf.reduce_max(scores, axis=1, keepdims=True)
        found = best[:, 0] > float("-inf")
        candidate = tf.range(tf.shape(scores, out_type=tf.int64)[1])
        pick = tf.reduce_min(tf.where(scores == best, candidate, tf.size(candidate, tf.int64)),
                             axis=1)
        pick = tf.where(found, pick, 0)
        window = windows.row_starts + pick // (n * n)
        rank = tf.stack([window, pick % (n * n) // n], axis=1)
        start = tf.gather_nd(tf.cast(top_start.indices, tf.int64), rank)
        end = tf.gather_nd(tf.cast(top_end.indices, tf.int64),
                           tf.stack([window, pick % n], axis=1))
        return window, start, end, found

    def signatures(self):
        return {"serving_default": self.answer.get_concrete_function()}


def normalized(text):
    """What tensorflow-text's `BertTokenizer(lower_case=True)` makes of `text` before it splits
    it, and what its offsets count bytes of (`BasicTokenizer.tokenize_with_offsets`): case
    folded, NFD without its non-spacing marks (accents), control and format characters made
    spaces. Each step may change a character's length in bytes (é: 2 -> 1, U+200B: 3 -> 1)."""
    text = tf.strings.regex_replace(tf_text.normalize_utf8(tf_text.case_fold_utf8(text), "NFD"),
                                    r"\p{Mn}", "")
    return tf.strings.regex_replace(text, r"\p{Cc}|\p{Cf}", " ")


def original_byte_offsets(context, start, end):
    """The byte offsets in `context` ([batch] strings) of the spans [start, end) ([batch]
    int64) of its `normalized` text: a span starts at the character whose normalized bytes
    hold its first byte and ends after the one holding its last, and after the accents that
    follow it (marks normalize to nothing). Each character normalized on its own gives its
    normalized length (the steps act per character; NFD's reordering of marks does not
    matter, as they are removed)."""
    chars, char_starts = tf.strings.unicode_split_with_offsets(context, "UTF-8")
    normalized_ends = tf.math.cumsum(tf.cast(tf.strings.length(normalized(chars)), tf.int64),
                                     axis=-1)
    # dense, with one column past every row's end (an empty context has no characters)
    past_end = tf.cast(tf.strings.length(context), tf.int64)[:, tf.newaxis]
    normalized_ends = tf.concat([normalized_ends.to_tensor(tf.int64.max),
                                 tf.fill(tf.shape(past_end), tf.int64.max)], axis=1)
    char_ends = tf.concat([(char_starts + tf.cast(tf.strings.length(chars), tf.int64))
                           .to_tensor(0), past_end], axis=1)
    char_starts = tf.concat([char_starts.to_tensor(0), past_end], axis=1)
    at = lambda offsets, byte, side: tf.gather(offsets, tf.searchsorted(
        normalized_ends, byte[:, tf.newaxis], side=side), batch_dims=1)[:, 0]
    # the end: after the character holding the last byte, or where the next character with
    # normalized bytes starts
    return at(char_starts, start, "right"), tf.maximum(at(char_ends, end - 1, "right"),
                                                       at(char_starts, end, "right"))


class Windows:
    """`squad_lib.convert_examples_to_features`' windows over each context, in the graph.

    An example whose question has q pieces gets windows of up to room = seq_length - 3 - q
    context pieces, starting min(room, doc_stride) apart, until one reaches the end. Flat
    over the batch (int64 [windows]): `example`, `start` and `length` (in context pieces),
    `first` (the sequence position of the window's first piece); per example: `count`,
    `row_starts` (its first window's flat index).
    """

    def __init__(self, query_lengths, context_lengths, seq_length, doc_stride):
        room = tf.maximum(seq_length - 3 - query_lengths, 1)
        step = tf.minimum(room, doc_stride)
        beyond = tf.maximum(context_lengths - room, 0)  # pieces the first window leaves
        self.count = 1 + (beyond + step - 1) // step
        index = tf.ragged.range(self.count)
        self.row_starts = index.row_starts()
        self.index = index.flat_values  # the window's rank within its example
        self.example = index.value_rowids()
        self.start = self.index * tf.gather(step, self.example)
        self.length = tf.minimum(tf.gather(room, self.example),
                                 tf.gather(context_lengths, self.example) - self.start)
        self.first = tf.gather(query_lengths, self.example) + 2

    def max_context(self, seq_length):
        """bool [windows, seq_length]: whether this window is the piece's "max context"
        window (`squad_lib._check_is_max_context`: the window where the piece has the most
        context on its poorer side, + 0.01 x window length; the first such window)."""
        siblings = lambda values: tf.gather(tf.RaggedTensor.from_row_lengths(
            values, self.count).to_tensor(), self.example)[:, tf.newaxis, :]
        starts, lengths = siblings(self.start), siblings(self.length)  # [windows, 1, K]
        piece = (self.start - self.first)[:, tf.newaxis] + tf.range(seq_length, dtype=tf.int64)
        piece = piece[:, :, tf.newaxis]  # [windows, seq_length, 1]: the position's piece
        left, right = piece - starts, starts + lengths - 1 - piece
        score = (tf.cast(tf.minimum(left, right), tf.float64)
                 + 0.01 * tf.cast(lengths, tf.float64))
        score = tf.where((left >= 0) & (right >= 0), score, float("-inf"))
        best = tf.reduce_max(score, axis=2, keepdims=True)
        sibling = tf.range(tf.shape(score, out_type=tf.int64)[2])
        first_best = tf.reduce_min(tf.where(score == best, sibling, tf.size(sibling,
                                                                             tf.int64)), axis=2)
        return first_best == self.index[:, tf.newaxis]
