"""Importing Hugging Face checkpoints: tiny real NLLB-200 and M2M-100 models that
tools/make_hf_checkpoints.py made with transformers, and what transformers computed from
them (tests/checkpoints/huggingface/<name>/expected.json, expected_logits.npy)."""

import json
import pathlib
import shutil

import ctranslate2
import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util
import safetensors
import safetensors.numpy
import seqio
from sentencepiece import sentencepiece_model_pb2

from conftest import saved_params
from conftest import tiny_run_bindings
from conftest import train_configured

import data_tasks
from t5x_mt.config import configurables
from t5x_mt.config import gin_utils
from t5x_mt.core import host_memory
from t5x_mt.model import parameter_layout
from t5x_mt.runs import run_layout
from t5x_mt.core import languages
from t5x_mt.core.errors import UserError
from t5x_mt.model.position_embeddings.sinusoidal import SINUSOIDS
from t5x_mt.config import run_loading
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import tags
from t5x_mt.data import vocab
from t5x_mt.export import ctranslate2_export
from t5x_mt.pretrained import hf_vocabulary
from t5x_mt.pretrained import huggingface
from test_launch_translate_evaluate import run_in_process

CHECKPOINTS = pathlib.Path(__file__).parent / 'checkpoints' / 'huggingface'
FAMILIES = ('nllb', 'm2m100', 'marian', 'marian_mul')
# The FLORES-200 codes of each checkpoint's expected.json languages.
FLORES = {'eng_Latn': 'eng_Latn', 'hau_Latn': 'hau_Latn', 'en': 'eng_Latn', 'ha': 'hau_Latn'}


def _expected(name: str) -> dict:
  return json.loads((CHECKPOINTS / name / 'expected.json').read_text(encoding='utf-8'))


@pytest.fixture(scope='module')
def imported(tmp_path_factory) -> dict[str, pathlib.Path]:
  runs = {}
  for name in FAMILIES:
    runs[name] = tmp_path_factory.mktemp('imported') / name
    huggingface.import_checkpoint(str(CHECKPOINTS / name), str(runs[name]))
  return runs


def _translator(run: pathlib.Path):
  return run_loading.load_translator(str(run), beam_size=1, no_repeat_ngram_size=0,
                                     max_length_ratio=0.0,
                                     max_decode_length=_expected(run.name)['max_new_tokens'])


def _checkpoint_ids(name: str) -> np.ndarray:
  directory = CHECKPOINTS / name
  return huggingface.vocabulary_of(directory, huggingface.read_config(directory)).checkpoint_ids


def _piece_of(token: str) -> str:
  """The t5x_mt piece of a checkpoint's token: its language tokens are tags."""
  if token.startswith('__') and token.endswith('__'):  # M2M-100's __en__.
    return languages.language_tag(languages.M2M100_TO_FLORES[token.strip('_')])
  if token.startswith('>>') and token.endswith('<<'):  # Marian's >>hau<<.
    return languages.language_tag(languages.marian_to_flores(token[2:-2]))
  return languages.language_tag(token) if token in languages.FLORES200_CODES else token


@pytest.mark.parametrize('name', FAMILIES)
def test_imported_vocabulary_segments_as_the_checkpoints_tokenizer(imported, name):
  # Sources as translation encodes them, targets as scoring does.
  expected = _expected(name)
  translator = _translator(imported[name])
  direction = tags.tags_for(translator.tag_strategy, FLORES[expected['src_lang']],
                            FLORES[expected['tgt_lang']])
  for sentence, tokens in zip(expected['sources'], expected['input_tokens'], strict=True):
    ids = translator.encode_source(sentence, direction)
    wanted = [_piece_of(token) for token in tokens if token != '<pad>']
    assert [translator.tokenizer.id_to_piece(i) for i in ids] == wanted
  checkpoint_ids = _checkpoint_ids(name)
  ours = {int(checkpoint_id): i for i, checkpoint_id in enumerate(checkpoint_ids)}
  tag = [translator.tokenizer.piece_to_id(direction.decoder_tag)] if direction.decoder_tag else []
  for sentence, labels in zip(expected['targets'], expected['labels'], strict=True):
    ids = tag + translator.tokenizer.encode(sentence) + [vocab.EOS_ID]
    assert ids == [ours[i] for i in labels if i != checkpoint_ids[0]]


@pytest.mark.parametrize('name', ['marian', 'marian_mul'])
def test_marian_sentences_hold_characters_one_sides_model_lacks(name):
  """What the equality tests hold for OPUS-MT: each side's test sentences have runs of
  characters its own SentencePiece model has no piece for, which transformers numbers as
  the other side's piece that spells the run where vocab.json has one, else as <unk>."""
  expected = _expected(name)
  tokens = {index: token for token, index in json.loads(
      (CHECKPOINTS / name / 'vocab.json').read_text(encoding='utf-8')).items()}
  lacking = {'source': {','}, 'target': {'ã', '&'}}
  for side, rows in (('source', expected['input_ids']), ('target', expected['labels'])):
    model = vocab.sentencepiece_processor(CHECKPOINTS / name / f'{side}.spm')
    assert {model.piece_to_id(piece) for piece in lacking[side]} == {model.unk_id()}
    pieces = {tokens[i] for row in rows for i in row}
    assert lacking[side] | {'<unk>'} <= pieces  # <unk>: 'Ọ̀' in English, '€5' in Hausa.


@pytest.mark.parametrize('name', FAMILIES)
def test_imported_logits_equal_transformers(imported, name):
  expected = _expected(name)
  translator = _translator(imported[name])
  checkpoint_ids = _checkpoint_ids(name)
  ours = {int(checkpoint_id): i for i, checkpoint_id in enumerate(checkpoint_ids)}
  to_ours = np.vectorize(lambda checkpoint_id: ours[int(checkpoint_id)])
  inputs, targets = to_ours(np.array(expected['input_ids'])), to_ours(np.array(expected['labels']))
  decoder_inputs = np.pad(targets[:, :-1], ((0, 0), (1, 0)))  # t5x_mt's start is token 0.
  logits = jax.jit(translator.model.module.apply)(
      {'params': translator.params}, jnp.asarray(inputs), jnp.asarray(decoder_inputs),
      jnp.asarray(targets))
  theirs = np.load(CHECKPOINTS / name / 'expected_logits.npy')[..., checkpoint_ids]
  real = targets > 0
  # Two float32 computations of a random post-LN model: a logit near 0.33 may differ in
  # its sixth digit.
  np.testing.assert_allclose(np.asarray(logits)[..., :len(checkpoint_ids)][real],
                             theirs[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('name', FAMILIES)
def test_imported_greedy_outputs_equal_transformers(imported, name):
  expected = _expected(name)
  translator = _translator(imported[name])
  outputs = translator.translate(expected['sources'], FLORES[expected['src_lang']],
                                 FLORES[expected['tgt_lang']])
  assert outputs == expected['greedy_texts']


def test_translate_command_reads_an_imported_run(imported, tmp_path, monkeypatch, capsys):
  expected = _expected('nllb')
  source = tmp_path / 'source.txt'
  source.write_text('\n'.join(expected['sources']) + '\n', encoding='utf-8')
  code, out, err = run_in_process('translate.py', [
      f'--checkpoint_dir={imported["nllb"]}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--input={source}', '--beam_size=1', '--no_repeat_ngram_size=0'], monkeypatch, capsys)
  assert code == 0, err
  # Greedy decoding to a longer limit continues the same outputs.
  for line, greedy in zip(out.splitlines(), expected['greedy_texts'], strict=True):
    assert line.startswith(greedy)


def test_a_language_the_checkpoint_lacks_is_one_line(imported, tmp_path, monkeypatch,
                                                     capsys):
  source = tmp_path / 'source.txt'
  source.write_text('Kenya\n', encoding='utf-8')
  output = tmp_path / 'out.txt'
  code, _, err = run_in_process('translate.py', [
      f'--checkpoint_dir={imported["m2m100"]}', '--src_lang=eng_Latn',
      '--tgt_lang=kin_Latn', f'--input={source}', f'--output={output}'], monkeypatch, capsys)
  assert code == 2
  assert err.strip().count('\n') == 0
  assert '<2kin_Latn>' in err and 'no token for that language' in err
  assert err.strip().endswith('(launch/extend_vocab.py adds a language to a run)')
  assert not output.exists()


def _broken_copy(tmp_path: pathlib.Path, change) -> pathlib.Path:
  copy = tmp_path / 'checkpoint'
  shutil.copytree(CHECKPOINTS / 'nllb', copy)
  change(copy)
  return copy


def _model_type(model_type: str):
  def change(folder: pathlib.Path) -> None:
    config = json.loads((folder / 'config.json').read_text())
    config['model_type'] = model_type
    (folder / 'config.json').write_text(json.dumps(config))
  return change


def _with_tensor(name: str, tensor: np.ndarray):
  def change(folder: pathlib.Path) -> None:
    tensors = safetensors.numpy.load_file(folder / 'model.safetensors')
    safetensors.numpy.save_file({**tensors, name: tensor}, folder / 'model.safetensors')
  return change


def _saved_sinusoids(scale: float) -> np.ndarray:
  """NLLB's position table as transformers keeps it (row 1, padding's, zero), times
  `scale`."""
  table = SINUSOIDS.fixed_table(66, 16)
  table[1] = 0.0
  return table * scale


def test_a_saved_position_table_of_the_models_sinusoids_imports(tmp_path):
  folder = _broken_copy(tmp_path, _with_tensor('model.encoder.embed_positions.weights',
                                               _saved_sinusoids(1.0)))
  huggingface.import_checkpoint(str(folder), str(tmp_path / 'run'))
  assert (tmp_path / 'run' / 'vocab.model').is_file()


@pytest.mark.parametrize('change, message', [
    (_with_tensor('model.encoder.embed_positions.weights', _saved_sinusoids(1.1)),
     'encoder.embed_positions.weights is not the sinusoidal table of its config.json'),
    (_with_tensor('model.encoder.layers.0.self_attn.rotary.weight', np.ones(4, np.float32)),
     "the weights hold encoder.layers.0.self_attn.rotary.weight, which t5x_mt's model has "
     'no place for'),
    (_model_type('bart'), "model_type 'bart' is not one t5x_mt imports"),
    (_model_type('nllb-moe'), "model_type 'nllb-moe' cannot be imported: NLLB-MoE's "
     'mixture-of-experts layers have no t5x_mt form'),
    (lambda folder: (folder / 'sentencepiece.bpe.model').unlink(),
     'sentencepiece.bpe.model: not found'),
    (lambda folder: (folder / 'model.safetensors').unlink(), 'no model.safetensors'),
])
def test_bad_checkpoint_folders_are_one_line_and_write_nothing(tmp_path, monkeypatch, capsys,
                                                               change, message):
  folder = _broken_copy(tmp_path, change)
  output = tmp_path / 'run'
  code, _, err = run_in_process('import_checkpoint.py', [
      '--format=huggingface', f'--path={folder}', f'--output_dir={output}'], monkeypatch, capsys)
  assert code == 2
  assert err.strip().count('\n') == 0 and message in err
  assert not output.exists()


def _fine_tuning_bindings(run_dir: pathlib.Path, imported_run: pathlib.Path,
                          train_steps: int, *extra: str) -> list[str]:
  """The tiny CLDR eng->hau run of conftest, starting from `imported_run`: its model and
  vocabulary come from the imported config.gin, parsed after demo.gin."""
  bindings = tiny_run_bindings(run_dir, imported_run / 'vocab.model',
                               'cldr_eng_Latn.hau_Latn', train_steps)
  return [binding for binding in bindings
          if not binding.startswith(('network.TransformerConfig.', 'VOCABULARY_PATH'))] + [
              f'training.TrainConfig.init_from = {str(imported_run)!r}', *extra]


def _train_from(imported_run: pathlib.Path, run_dir: pathlib.Path, train_steps: int,
                *extra: str) -> None:
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin', str(imported_run / 'config.gin')],
                      _fine_tuning_bindings(run_dir, imported_run, train_steps, *extra))
  train_configured()


@pytest.mark.slow  # A short training each, resumed once for Marian: 20 to 30 s.
@pytest.mark.parametrize('name, train_steps, lora_rank', [('nllb', (2,), 4),
                                                          ('marian', (2, 4), 0)])
def test_fine_tuning_an_imported_model_starts_from_it_checkpoints_and_resumes(
    imported, tmp_path, name, train_steps, lora_rank):
  # NLLB's tags on both sides and EOS as its decoder start, with LoRA; Marian's sources
  # segmented by a model of their own, no tags, fully, and the same command run further:
  # it resumes.
  run_dir = tmp_path / 'finetuned'
  for steps in train_steps:
    _train_from(imported[name], run_dir, steps, f'LORA_RANK = {lora_rank}')
  logged = [json.loads(line)['step'] for line in
            (run_dir / 'metrics.jsonl').read_text(encoding='utf-8').splitlines()]
  assert logged == list(range(1, train_steps[-1] + 1))
  assert run_loading.saved_steps(str(run_dir)) == list(range(2, train_steps[-1] + 1, 2))
  assert (run_dir / 'source_vocab.model').is_file() == (name == 'marian')
  started_from = saved_params(imported[name], 0)
  if lora_rank:  # The import is the frozen base, read from its folder, not saved again.
    assert json.loads((run_dir / 'base_run.json').read_text()) == {
        'run': str(imported[name]), 'step': 0}
    assert len(saved_params(run_dir, 2)) < len(started_from)
    params = run_loading.load_translator(str(run_dir), beam_size=1).params
    base = [leaf for path, leaf in sorted(traverse_util.flatten_dict(params).items())
            if not parameter_layout.is_lora_path(path)]
    for got, want in zip(base, started_from, strict=True):
      np.testing.assert_array_equal(got, want)
    return
  after_two_steps = saved_params(run_dir, 2)
  # Two small Adam steps away from the imported weights, which a fresh start is not.
  assert max(np.abs(a - b).max() for a, b in zip(after_two_steps, started_from)) < 0.01


@pytest.mark.parametrize('name', ['nllb', 'marian'])
def test_an_imported_model_exported_to_ctranslate2_scores_as_transformers(imported, tmp_path,
                                                                          name):
  expected = _expected(name)
  ctranslate2_export.export_run(str(imported[name]), str(tmp_path / 'ct2'), 'float32')
  served = ctranslate2.Translator(str(tmp_path / 'ct2'), device='cpu')
  checkpoint_ids = _checkpoint_ids(name)
  logits = np.load(CHECKPOINTS / name / 'expected_logits.npy')[..., checkpoint_ids]
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  columns = {int(checkpoint_id): i for i, checkpoint_id in enumerate(checkpoint_ids)}
  tokenizer = vocab.sentencepiece_processor(imported[name] / 'vocab.model')
  pad = int(checkpoint_ids[0])
  for row, (source, labels) in enumerate(zip(expected['input_tokens'], expected['labels'])):
    labels = [label for label in labels if label != pad]
    source_pieces = [_piece_of(token) for token in source if token != '<pad>']
    target_pieces = [tokenizer.id_to_piece(columns[label]) for label in labels[:-1]]
    scores = served.score_batch([source_pieces], [target_pieces])[0].log_probs
    wanted = [log_probs[row, position, columns[label]] for position, label in enumerate(labels)]
    np.testing.assert_allclose(scores, wanted, atol=1e-4, rtol=0)


def test_sharded_weights_import_as_one_file_does(imported, tmp_path):
  folder = tmp_path / 'sharded'
  shutil.copytree(CHECKPOINTS / 'm2m100', folder)
  tensors = safetensors.numpy.load_file(folder / 'model.safetensors')
  (folder / 'model.safetensors').unlink()
  names = sorted(tensors)
  weight_map = {}
  for index, part in enumerate((names[:len(names) // 2], names[len(names) // 2:])):
    shard = f'model-0000{index + 1}-of-00002.safetensors'
    safetensors.numpy.save_file({name: tensors[name] for name in part}, folder / shard)
    weight_map.update(dict.fromkeys(part, shard))
  (folder / 'model.safetensors.index.json').write_text(json.dumps({'weight_map': weight_map}))
  huggingface.import_checkpoint(str(folder), str(tmp_path / 'run'))
  for ours, theirs in zip(saved_params(tmp_path / 'run', 0),
                          saved_params(imported['m2m100'], 0), strict=True):
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow  # Two evaluations: about 12 s.
def test_evaluate_and_average_checkpoints_read_an_imported_run(imported, tmp_path, monkeypatch,
                                                              capsys):
  expected = _expected('nllb')
  source, reference = tmp_path / 'source.txt', tmp_path / 'reference.txt'
  source.write_text('\n'.join(expected['sources']) + '\n', encoding='utf-8')
  # References equal to the run's own greedy outputs: evaluation must score them 100.
  outputs = run_loading.load_translator(str(imported['nllb']), beam_size=1,
                                        no_repeat_ngram_size=0).translate(
                                            expected['sources'], 'eng_Latn', 'hau_Latn')
  reference.write_text('\n'.join(outputs) + '\n', encoding='utf-8')
  code, _, err = run_in_process('average_checkpoints.py', [
      f'--checkpoint_dir={imported["nllb"]}', '--last=1',
      f'--output_dir={tmp_path / "averaged"}'], monkeypatch, capsys)
  assert code == 0, err
  for run in (imported['nllb'], tmp_path / 'averaged'):
    code, out, err = run_in_process('evaluate.py', [
        f'--checkpoint_dir={run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
        f'--src_file={source}', f'--ref_file={reference}', '--beam_size=1',
        '--no_repeat_ngram_size=0'],
        monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])['chrf'] == pytest.approx(100.0)


def test_import_command_writes_a_run_folder_and_says_what_it_holds(tmp_path, monkeypatch,
                                                                  capsys):
  output = tmp_path / 'run'
  code, out, err = run_in_process('import_checkpoint.py', [
      '--format=huggingface', f'--path={CHECKPOINTS / "m2m100"}', f'--output_dir={output}'],
      monkeypatch, capsys)
  assert code == 0, err
  # 301 dictionary entries, 100 language tokens, 8 made-up words; Breton and Western Frisian
  # have no FLORES-200 code.
  assert out.strip() == (f'imported {CHECKPOINTS / "m2m100"} into {output}: 2+2 layers, d 16, '
                         '409 tokens, 98 languages')
  assert sorted(path.name for path in output.iterdir()) == ['checkpoints', 'config.gin',
                                                            'vocab.model']


@pytest.mark.parametrize('name', ['marian', 'marian_mul'])
def test_training_examples_are_segmented_as_the_checkpoints_tokenizer(imported, name):
  # Sources by the source side's model, targets by the target side's, with the tags of
  # the import's tag strategy: what fine-tuning trains on.
  expected = _expected(name)
  run = imported[name]
  corpus = f'test_import_{name}'
  corpora.register_corpus(corpus, lambda: corpus_types.PairsCorpus(corpus, 'train', {
      ('eng_Latn', 'hau_Latn'): list(zip(expected['sources'], expected['targets']))}),
      overwrite=True)
  previous = data_tasks.settings()
  gin.clear_config()
  gin_utils.parse_gin([str(run / 'config.gin')], [])
  data_tasks.configure(configurables.data_settings())
  try:
    task = seqio.get_mixture_or_task(
        data_tasks.register_direction_task(corpus, 'eng_Latn', 'hau_Latn'))
    examples = list(task.get_dataset(None, split='train', shuffle=False).as_numpy_iterator())
  finally:
    data_tasks.configure(previous)
    gin.clear_config()
  ours = {int(checkpoint_id): i for i, checkpoint_id in enumerate(_checkpoint_ids(name))}
  pad = int(_checkpoint_ids(name)[0])
  for example, input_ids, labels in zip(examples, expected['input_ids'], expected['labels'],
                                        strict=True):
    assert example['inputs'].tolist() == [ours[i] for i in input_ids if i != pad]
    assert example['targets'].tolist() == [ours[i] for i in labels if i != pad]


def test_marian_language_codes_map_to_one_flores_code_each():
  assert languages.marian_to_flores('hau') == 'hau_Latn'
  assert languages.marian_to_flores('zho_Hant') == 'zho_Hant'
  assert languages.marian_to_flores('zho') is None  # Two scripts in FLORES-200.
  assert languages.marian_to_flores('xyz') is None


def test_a_language_named_by_two_tokens_gets_one_tag(tmp_path):
  folder = tmp_path / 'marian_mul'
  shutil.copytree(CHECKPOINTS / 'marian_mul', folder)
  tokens = json.loads((folder / 'vocab.json').read_text(encoding='utf-8'))
  tokens['>>hau_Latn<<'] = len(tokens)  # After >>hau<<: the earlier token keeps the tag.
  (folder / 'vocab.json').write_text(json.dumps(tokens), encoding='utf-8')
  converted = hf_vocabulary.convert(folder, {'pad': tokens['<pad>'], 'eos': 0, 'bos': None},
                                    len(tokens))
  model = sentencepiece_model_pb2.ModelProto.FromString(converted.model)
  named = {piece.piece: piece.type for piece in model.pieces}
  assert named['<2hau_Latn>'] == named['<2yor_Latn>'] == model.SentencePiece.USER_DEFINED
  assert named['>>hau_Latn<<'] == model.SentencePiece.CONTROL
  tag_row = [piece.piece for piece in model.pieces].index('<2hau_Latn>')
  assert converted.checkpoint_ids[tag_row] == tokens['>>hau<<']


def test_a_unigram_tokenizer_json_lists_its_pieces_in_id_order(tmp_path):
  folder = tmp_path / 'nllb'
  shutil.copytree(CHECKPOINTS / 'nllb', folder)
  tokenizer = json.loads((folder / 'tokenizer.json').read_text(encoding='utf-8'))
  pieces = sorted(tokenizer['model']['vocab'].items(), key=lambda item: item[1])
  tokenizer['model']['vocab'] = [[piece, 0.0] for piece, _ in pieces]
  (folder / 'tokenizer.json').write_text(json.dumps(tokenizer), encoding='utf-8')
  config = huggingface.read_config(folder)
  np.testing.assert_array_equal(huggingface.vocabulary_of(folder, config).checkpoint_ids,
                                _checkpoint_ids('nllb'))


def test_recorded_directions_refuse_other_targets(tmp_path, monkeypatch, capsys):
  run = tmp_path / 'run'
  code, _, err = run_in_process('import_checkpoint.py', [
      f'--path={CHECKPOINTS / "marian"}', f'--output_dir={run}',
      '--directions=eng_Latn-hau_Latn'], monkeypatch, capsys)
  assert code == 0, err
  source = tmp_path / 'source.txt'
  source.write_text('Kenya\n', encoding='utf-8')
  code, _, err = run_in_process('translate.py', [
      f'--checkpoint_dir={run}', '--src_lang=eng_Latn', '--tgt_lang=yor_Latn',
      f'--input={source}'], monkeypatch, capsys)
  assert code == 2
  assert err.strip() == ('error: yor_Latn: the model was never trained to translate into it; '
                         'it translates into hau_Latn')


def test_a_direction_in_a_language_the_checkpoint_lacks_is_refused(tmp_path, monkeypatch,
                                                                   capsys):
  code, _, err = run_in_process('import_checkpoint.py', [
      f'--path={CHECKPOINTS / "m2m100"}', f'--output_dir={tmp_path / "run"}',
      '--directions=eng_Latn-kin_Latn'], monkeypatch, capsys)
  assert code == 2
  assert err.strip() == ('error: --directions: eng_Latn-kin_Latn: the checkpoint has no token '
                         'for kin_Latn (launch/extend_vocab.py adds a language to the imported '
                         'run)')
  assert not (tmp_path / 'run').exists()


def test_a_bfloat16_import_stores_the_rounded_weights_and_computes_from_them(imported,
                                                                           tmp_path):
  run = tmp_path / 'bfloat16' / 'nllb'  # Named as the checkpoint: _translator reads its limit.
  huggingface.import_checkpoint(str(CHECKPOINTS / 'nllb'), str(run), storage_dtype='bfloat16')
  stored, full = saved_params(run, 0), saved_params(imported['nllb'], 0)
  assert {leaf.dtype for leaf in stored} == {np.dtype(jnp.bfloat16)}
  for rounded, weights in zip(stored, full, strict=True):
    np.testing.assert_array_equal(rounded, weights.astype(jnp.bfloat16))
  # Read into the float32 model, the rounded weights translate.
  translator = _translator(run)
  assert {leaf.dtype for leaf in jax.tree.leaves(translator.params)} == {np.dtype('float32')}
  expected = _expected('nllb')
  outputs = translator.translate(expected['sources'], 'eng_Latn', 'hau_Latn')
  assert len(outputs) == len(expected['sources'])


def test_the_weights_are_read_when_converted_and_an_import_too_big_is_refused_first(
    tmp_path, monkeypatch, capsys):
  weights = huggingface.read_weights(CHECKPOINTS / 'nllb')
  with safetensors.safe_open(CHECKPOINTS / 'nllb' / 'model.safetensors', 'numpy') as opened:
    sizes = {key: opened.get_tensor(key).size for key in opened.keys()}
  assert weights.float32_bytes() == (4 * sum(sizes.values()), 4 * max(sizes.values()))
  total = weights.float32_bytes()[0]
  output = tmp_path / 'run'
  monkeypatch.setattr(host_memory, 'available_bytes', lambda: total)
  code, out, err = run_in_process('import_checkpoint.py', [
      '--format=huggingface', f'--path={CHECKPOINTS / "nllb"}', f'--output_dir={output}'],
      monkeypatch, capsys)
  assert code == 2 and out == '' and err.count('\n') == 1
  needed = int(1.1 * total) + 2 * weights.float32_bytes()[1] + 1.5 * 2**30
  assert err.startswith(f'error: --path: importing needs {needed / 2**30:.1f} GiB of host '
                        f'memory ({total / 2**30:.1f} GiB of float32 weights), '
                        f'{total / 2**30:.1f} GiB is available'), err
  assert not output.exists()


def test_a_multilingual_opus_mt_model_records_directions_by_their_target(tmp_path,
                                                                       monkeypatch, capsys):
  # Its sources carry no tag: a source language needs no token, a target language does.
  run = tmp_path / 'run'
  code, _, err = run_in_process('import_checkpoint.py', [
      f'--path={CHECKPOINTS / "marian_mul"}', f'--output_dir={run}',
      '--directions=eng_Latn-hau_Latn'], monkeypatch, capsys)
  assert code == 0, err
  assert run_layout.RunLayout(run).trained_directions() == ['eng_Latn-hau_Latn']
  code, _, err = run_in_process('import_checkpoint.py', [
      f'--path={CHECKPOINTS / "marian_mul"}', f'--output_dir={tmp_path / "other"}',
      '--directions=hau_Latn-kin_Latn'], monkeypatch, capsys)
  assert code == 2 and err.strip() == ('error: --directions: hau_Latn-kin_Latn: the '
                                       'checkpoint has no token for kin_Latn '
                                       '(launch/extend_vocab.py adds a language to the '
                                       'imported run)')


def test_an_import_into_a_relative_folder_names_its_vocabulary_by_its_absolute_path(
    tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  code, _, err = run_in_process('import_checkpoint.py', [
      f'--path={CHECKPOINTS / "nllb"}', '--output_dir=imp/nllb'], monkeypatch, capsys)
  assert code == 0, err
  assert (f"VOCABULARY_PATH = '{tmp_path / 'imp' / 'nllb' / 'vocab.model'}'" in
          (tmp_path / 'imp' / 'nllb' / 'config.gin').read_text(encoding='utf-8'))


@pytest.mark.parametrize('macro', ['INPUTS_LENGTH', 'TARGETS_LENGTH'])
def test_a_length_past_the_imported_models_positions_is_refused_before_training(
    imported, tmp_path, macro):
  # The tiny NLLB has 64 positions; 128 would read past its table (NaN).
  run_dir = tmp_path / 'finetuned'
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin', str(imported['nllb'] / 'config.gin')],
                      _fine_tuning_bindings(run_dir, imported['nllb'], 2, f'{macro} = 128'))
  with pytest.raises(UserError, match=rf'^{macro}: 128 is longer than the model\'s 64 '
                     r'positions \(network.TransformerConfig.max_length\); set it to at '
                     'most 64$'):
    train_configured()
  assert not run_dir.exists()
