"""Importing Hugging Face checkpoints: tiny real NLLB-200 and M2M-100 models that
tools/make_hf_checkpoints.py made with transformers, and what transformers computed from
them (tests/checkpoints/huggingface/<name>/expected.json, expected_logits.npy)."""

import json
import pathlib
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt import languages
from t5x_mt import run_loading
from t5x_mt.data import tags
from t5x_mt.pretrained import hf_vocabulary
from t5x_mt.pretrained import huggingface
from tests.test_launch_translate_evaluate import run_in_process

CHECKPOINTS = pathlib.Path(__file__).parent / 'checkpoints' / 'huggingface'
FAMILIES = ('nllb', 'm2m100')
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
  config = huggingface.read_config(directory)
  return hf_vocabulary.convert(directory, huggingface._special_ids(config, directory),
                               config['vocab_size']).checkpoint_ids


def _piece_of(token: str) -> str:
  """The t5x_mt piece of a checkpoint's token: its language tokens are tags."""
  if token.startswith('__') and token.endswith('__'):  # M2M-100's __en__.
    return languages.language_tag(languages.M2M100_TO_FLORES[token.strip('_')])
  return languages.language_tag(token) if token in languages.FLORES200_CODES else token


@pytest.mark.parametrize('name', FAMILIES)
def test_imported_vocabulary_segments_as_the_checkpoints_tokenizer(imported, name):
  expected = _expected(name)
  translator = _translator(imported[name])
  direction = tags.tags_for(translator.tag_strategy, FLORES[expected['src_lang']],
                            FLORES[expected['tgt_lang']])
  for sentence, tokens in zip(expected['sources'], expected['input_tokens']):
    ids = translator.encode_source(sentence, direction)
    wanted = [_piece_of(token) for token in tokens if token != '<pad>']
    assert [translator.tokenizer.id_to_piece(i) for i in ids] == wanted


@pytest.mark.parametrize('name', FAMILIES)
def test_imported_logits_equal_transformers(imported, name):
  expected = _expected(name)
  translator = _translator(imported[name])
  checkpoint_ids = _checkpoint_ids(name)
  ours = {int(checkpoint_id): i for i, checkpoint_id in enumerate(checkpoint_ids)}
  to_ours = np.vectorize(lambda checkpoint_id: ours[int(checkpoint_id)])
  inputs, targets = to_ours(np.array(expected['input_ids'])), to_ours(np.array(expected['labels']))
  decoder_inputs = np.pad(targets[:, :-1], ((0, 0), (1, 0)))  # t5x_mt's start is token 0.
  logits = translator.model.module.apply({'params': translator.params}, jnp.asarray(inputs),
                                         jnp.asarray(decoder_inputs), jnp.asarray(targets))
  theirs = np.load(CHECKPOINTS / name / 'expected_logits.npy')[..., checkpoint_ids]
  real = targets > 0
  np.testing.assert_allclose(np.asarray(logits)[..., :len(checkpoint_ids)][real],
                             theirs[real], atol=1e-5, rtol=0)


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
  assert not output.exists()


def _broken_copy(tmp_path: pathlib.Path, change) -> pathlib.Path:
  copy = tmp_path / 'checkpoint'
  shutil.copytree(CHECKPOINTS / 'nllb', copy)
  change(copy)
  return copy


def _set_model_type(folder: pathlib.Path) -> None:
  config = json.loads((folder / 'config.json').read_text())
  config['model_type'] = 'bart'
  (folder / 'config.json').write_text(json.dumps(config))


@pytest.mark.parametrize('change, message', [
    (_set_model_type, "model_type 'bart' is not one t5x_mt imports"),
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
