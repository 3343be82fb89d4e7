"""The BERT SavedModel export: reloaded in a fresh process, it serves token ids and raw text
with the outputs of the Keras encoder it was exported from."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from recipes.bert import export as export_lib
from recipes.bert import model as model_lib
from recipes.bert.config import ModelConfig

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LENGTH = 12
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
         ".", "##s", "dog"]
TEXTS = ["The cats sat on the mat.", "dog", "the " * 40, "zebra"]


def expected_packing(text):
    """[CLS] pieces [SEP] + padding, written out by hand for the test vocabulary: lower
    case, whitespace and punctuation split, `cats` -> `cat ##s`, unknown words -> [UNK]."""
    ids = {token: i for i, token in enumerate(VOCAB)}
    pieces = []
    for word in text.lower().replace(".", " .").split():
        if word in ids:
            pieces.append(ids[word])
        elif word.endswith("s") and word[:-1] in ids:
            pieces += [ids[word[:-1]], ids["##s"]]
        else:
            pieces.append(ids["[UNK]"])
    word_ids = [ids["[CLS]"]] + pieces[: SEQ_LENGTH - 2] + [ids["[SEP]"]]
    mask = [1] * len(word_ids)
    padding = SEQ_LENGTH - len(word_ids)
    return word_ids + [0] * padding, mask + [0] * padding


FRESH_PROCESS = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops the SavedModel uses
export_dir, inputs_path, outputs_path = sys.argv[1:]
loaded = tf.saved_model.load(export_dir)
inputs = np.load(inputs_path)
by_ids = loaded.signatures["serving_default"](
    input_word_ids=tf.constant(inputs["input_word_ids"]),
    input_mask=tf.constant(inputs["input_mask"]),
    input_type_ids=tf.constant(inputs["input_type_ids"]))
with open(inputs_path + ".json", encoding="utf-8") as f:
    texts = json.load(f)
by_text = loaded.signatures["serve_text"](text=tf.constant(texts))
np.savez(outputs_path, **{"ids_" + k: v.numpy() for k, v in by_ids.items()},
         **{"text_" + k: v.numpy() for k, v in by_text.items()})
"""


@pytest.mark.slow  # a second Python process imports TensorFlow
def test_export_reloads_in_a_fresh_process_with_the_keras_outputs(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    model_config = ModelConfig(hidden_size=16, num_layers=1, num_attention_heads=2,
                               intermediate_size=32, max_sequence_length=32)
    encoder, _ = model_lib.build_pretrainer(model_config, len(VOCAB))
    export_dir = str(tmp_path / "export")
    export_lib.export_encoder(export_dir, encoder, str(vocab_file), SEQ_LENGTH)
    vocab_file.unlink()  # the export must carry its own copy of the vocabulary

    packed = [expected_packing(text) for text in TEXTS]
    inputs = {
        "input_word_ids": np.array([ids for ids, _ in packed], np.int32),
        "input_mask": np.array([mask for _, mask in packed], np.int32),
        "input_type_ids": np.zeros((len(TEXTS), SEQ_LENGTH), np.int32),
    }
    inputs_path = str(tmp_path / "inputs.npz")
    np.savez(inputs_path, **inputs)
    with open(inputs_path + ".json", "w", encoding="utf-8") as f:
        json.dump(TEXTS, f)
    outputs_path = str(tmp_path / "outputs.npz")
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, export_dir, inputs_path, outputs_path],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stderr[-3000:]
    served = np.load(outputs_path)

    keras_outputs = encoder({k: tf.constant(v) for k, v in inputs.items()}, training=False)
    for name in ("sequence_output", "pooled_output"):
        expected = keras_outputs[name].numpy()
        np.testing.assert_allclose(served["ids_" + name], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(served["text_" + name], expected, rtol=1e-5, atol=1e-6)
    # The in-graph tokenizer packed [CLS] text [SEP] exactly as written out by hand.
    np.testing.assert_array_equal(served["text_input_word_ids"], inputs["input_word_ids"])
    np.testing.assert_array_equal(served["text_input_mask"], inputs["input_mask"])
    np.testing.assert_array_equal(served["text_input_type_ids"], inputs["input_type_ids"])
    assert served["ids_sequence_output"].shape == (len(TEXTS), SEQ_LENGTH, 16)

