"""Translator batching: length buckets, the decoding cache's stages, parallel batches."""

import dataclasses
import os

import jax
import numpy as np
import pytest

from t5x_mt.model import decode_cache
from t5x_mt.decoding import inference
from t5x_mt.core import partitioning
from t5x_mt.decoding import prediction
from t5x_mt.config import run_loading
from t5x_mt.data import tags
from t5x_mt.core.errors import UserError

SENTENCES = ['Good morning', 'Where is the station?', 'Thank you very much', 'Yes',
             'The first of January 2024', 'Seven', 'Monday, Tuesday and Wednesday']


@pytest.mark.parametrize('length, limit, bucket', [
    (1, 256, 8), (8, 256, 8), (9, 256, 12), (13, 256, 16), (17, 256, 24), (33, 256, 48), (97, 256, 128),
    (129, 256, 192), (200, 256, 256), (200, 160, 160), (5000, 4096, 1024)])
def test_inputs_pad_to_the_smallest_bucket_that_holds_them(length, limit, bucket):
  assert inference.bucket_length(length, limit) == bucket


@pytest.mark.parametrize('max_decode_length, stages', [
    (5, (5,)), (8, (8,)), (32, (8, 16, 32)), (48, (8, 16, 32, 48)), (272, (8, 16, 32, 64,
                                                                         128, 256, 272))])
def test_decoding_cache_doubles_from_its_first_stage_to_the_limit(max_decode_length, stages):
  assert decode_cache.stage_lengths(max_decode_length) == stages


def _unsharded_translator(trained_run, **overrides) -> inference.Translator:
  loaded = run_loading.load_translator(str(trained_run), batch_size=2, beam_size=2)
  return inference.Translator(loaded.model, jax.device_get(loaded.params),
                              loaded.vocabulary_file, loaded.tag_strategy,
                              dataclasses.replace(loaded.settings, **overrides))


@pytest.mark.slow
def test_parallel_batches_translate_as_one_batch_at_a_time_in_input_order(trained_run):
  one_at_a_time = _unsharded_translator(trained_run, parallel_batches=1)
  parallel = _unsharded_translator(trained_run, parallel_batches=3)
  expected = one_at_a_time.translate(SENTENCES, 'eng_Latn', 'hau_Latn')
  assert parallel.translate(SENTENCES, 'eng_Latn', 'hau_Latn') == expected
  # Each sentence keeps its own translation, whatever batch and thread decoded it.
  singles = [one_at_a_time.translate([s], 'eng_Latn', 'hau_Latn')[0] for s in SENTENCES]
  assert expected == singles


def test_parallel_batches_default_to_the_cores_of_one_cpu_device_only(trained_run):
  assert _unsharded_translator(trained_run).parallel_batches == (os.cpu_count() or 1)
  loaded = run_loading.load_translator(str(trained_run))
  assert loaded.mesh.size == 8 and loaded.parallel_batches == 1
  one_device = inference.Translator(
      loaded.model, loaded.params, loaded.vocabulary_file, loaded.tag_strategy,
      loaded.settings, mesh=partitioning.create_mesh((1, 1), jax.devices()[:1]))
  assert one_device.parallel_batches == (os.cpu_count() or 1)


def test_parallel_batches_below_one_are_rejected():
  with pytest.raises(UserError, match='decoding.DecodeSettings.parallel_batches: must be >= 1, got 0'):
    inference.DecodeSettings(parallel_batches=0)


def test_the_encoder_runs_at_the_longest_input_and_the_search_at_its_bucket(trained_run):
  translator = _unsharded_translator(trained_run, parallel_batches=1)
  model = translator.model
  encode = model.encode
  calls = []

  def recording_encode(params, tokens, direction, *, padded_length):
    calls.append((tokens.shape[1], padded_length))
    return encode(params, tokens, direction, padded_length=padded_length)

  def bucket_padded_encode(params, tokens, direction, *, padded_length):
    padded = np.pad(tokens, ((0, 0), (0, padded_length - tokens.shape[1])))
    return encode(params, padded, direction, padded_length=padded_length)

  model.encode = recording_encode
  exact = translator.translate(SENTENCES, 'eng_Latn', 'hau_Latn')
  tags_of = tags.tags_for(translator.tag_strategy, 'eng_Latn', 'hau_Latn')
  lengths = sorted(len(translator.encode_source(s, tags_of)) for s in SENTENCES)
  longest = [max(lengths[i:i + 2]) for i in range(0, len(lengths), 2)]
  assert calls == [(n, inference.bucket_length(n, translator.max_input_length))
                   for n in longest]
  # Padding is masked: encoding every batch at its bucket length translates the same.
  model.encode = bucket_padded_encode
  assert translator.translate(SENTENCES, 'eng_Latn', 'hau_Latn') == exact


def _record_searches(monkeypatch) -> list[tuple[np.ndarray, np.ndarray]]:
  """The list to which every Translator now appends each batch's encoder tokens [B,
  length] and output ids [B, max_decode_length] (the forced tag first)."""
  predict_batch = prediction.predict_batch
  searches = []

  def recording_predict_batch(model, params, encoder_tokens, **kwargs):
    outputs = predict_batch(model, params, encoder_tokens, **kwargs)
    searches.append((np.asarray(encoder_tokens), np.asarray(outputs)))
    return outputs

  monkeypatch.setattr(prediction, 'predict_batch', recording_predict_batch)
  return searches


def _generated(output_ids: np.ndarray, eos_id: int) -> list[int]:
  """The ids a search generated after the forced tag, up to and including EOS."""
  ids = output_ids[1:].tolist()
  return ids[:ids.index(eos_id) + 1] if eos_id in ids else ids


def test_output_limits_reach_the_search_through_the_settings(trained_run, monkeypatch):
  """The tiny trained run loops to the length limit; a length ratio of 1 ends every output
  by the source's length plus one piece, and no bigram repeats."""
  limited = _unsharded_translator(trained_run, max_length_ratio=1.0, max_length_offset=1,
                                  no_repeat_ngram_size=2)
  searches = _record_searches(monkeypatch)
  assert all(limited.translate(SENTENCES, 'eng_Latn', 'hau_Latn'))
  eos_id = limited.tokenizer.eos_id()
  for encoder_tokens, outputs in searches:
    for source, output in zip(encoder_tokens, outputs):
      generated = _generated(output, eos_id)
      # Source pieces count its tag and EOS; generated ones their EOS, not the forced tag.
      assert len(generated) <= np.count_nonzero(source) + 1
      bigrams = list(zip(output[:1 + len(generated)], generated))
      assert len(bigrams) == len(set(bigrams)), output
  with pytest.raises(UserError, match='max_length_ratio: must be >= 0'):
    inference.DecodeSettings(max_length_ratio=-1.0)


def test_reserved_pieces_are_the_vocabularys_tags_and_control_pieces_but_eos(trained_run):
  translator = _unsharded_translator(trained_run)
  tokenizer = translator.tokenizer
  reserved = {tokenizer.id_to_piece(int(i)) for i in np.flatnonzero(
      tags.reserved_pieces(tokenizer))}
  assert reserved == {'<pad>', '<unk>'} | set(tags.special_symbols())
  assert len(tags.special_symbols()) == 204 + 2 + 32  # Tags, <BT> and <DA>, TBD<i>.
  assert tokenizer.id_to_piece(1) == '</s>'


def test_detokenised_text_drops_every_reserved_piece(trained_run):
  """A search that bans nothing (a decoder tag not forced) may output tags; the text never
  holds them."""
  translator = _unsharded_translator(trained_run)
  piece = translator.tokenizer.piece_to_id
  words = translator.tokenizer.encode('Monday and Tuesday')
  generated = ([piece('<2hau_Latn>'), piece('<2amh_Ethi>')] + words[:2] + [piece('<BT>')]
               + words[2:] + [piece('<DA>'), piece('TBD3'), 0, 2, 1, piece('<2hau_Latn>')])
  assert translator.decode_target(generated) == 'Monday and Tuesday'


def test_translations_hold_no_tag_where_the_model_prefers_one(trained_run, monkeypatch):
  """The tiny run's favourite next piece is often a language tag (the forced decoder tag is
  the one target piece it learned well): the search never generates one after the forced
  tag, so no translation holds one."""
  translator = _unsharded_translator(trained_run, parallel_batches=1)
  searches = _record_searches(monkeypatch)
  outputs = translator.translate(SENTENCES, 'eng_Latn', 'hau_Latn')
  assert all(outputs) and not any('<2' in output for output in outputs), outputs
  reserved = tags.reserved_pieces(translator.tokenizer)
  for _, output_ids in searches:
    for ids in output_ids:
      assert not reserved[_generated(ids, translator.tokenizer.eos_id())].any(), ids
