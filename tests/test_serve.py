"""launch/serve.py: LibreTranslate's API over a CTranslate2 export of a tiny model, its
answers those of translate.py whatever else shares their batch, its limits and errors;
and one real server (uvicorn, in a subprocess) driven by LibreTranslate's own client and
a headless browser, then stopped with SIGTERM under load."""

import concurrent.futures
import json
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import libretranslatepy
import pytest
from selenium import webdriver
from selenium.webdriver.support import ui
from starlette import testclient

from t5x_mt.config import run_loading
from t5x_mt.export import ctranslate2_export
from t5x_mt.export import ctranslate2_translator
from t5x_mt.runs import run_layout
from t5x_mt.serving import app

from test_export import random_run
from test_launch_translate_evaluate import command_environment
from test_launch_translate_evaluate import LAUNCH
from test_launch_translate_evaluate import run_in_process

DIRECTIONS = ['eng_Latn-hau_Latn', 'eng_Latn-fra_Latn', 'hau_Latn-eng_Latn']
SENTENCES = ['Monday', '10 kilometres', 'Tuesday, 3 March 2015', 'English and French',
             '45 minutes ago', 'Thursday', 'one two three four five six seven', 'Friday']


@pytest.fixture(scope='module')
def exported(trained_run, tmp_path_factory) -> pathlib.Path:
  """A CTranslate2 export of a random model of DIRECTIONS whose translations differ and
  end before their length limit (so that they cannot depend on their batch's limit). Its
  output projection is its own: tied, the rows `random_run` points away from would make
  the tags' embeddings alike, and every direction's translations the same."""
  folder = tmp_path_factory.mktemp('serve')
  run, _, _ = random_run(trained_run, folder / 'run',
                         {'network.TransformerConfig.logits_via_embedding': 'False'},
                         eos_weight=2.0, seed=1)
  run_layout.RunLayout(run).write_directions(DIRECTIONS)
  ctranslate2_export.export_run(str(run), str(folder / 'ct2'), 'float32')
  return folder / 'ct2'


def served(exported: pathlib.Path, **settings) -> testclient.TestClient:
  translator = ctranslate2_translator.load_translator(str(exported), {})
  return testclient.TestClient(app.translator_app(translator, str(exported),
                                                  app.ServerSettings(**settings)))


def translate_py(exported: pathlib.Path, lines: list[str], tmp_path, monkeypatch, capsys,
                 model_flag: str = '--ctranslate2', direction: str = DIRECTIONS[0]
                 ) -> list[str]:
  input_file = tmp_path / 'input.txt'
  input_file.write_text(''.join(f'{line}\n' for line in lines), encoding='utf-8')
  src_lang, tgt_lang = direction.split('-')
  code, out, err = run_in_process('translate.py', [
      f'{model_flag}={exported}', f'--src_lang={src_lang}', f'--tgt_lang={tgt_lang}',
      f'--input={input_file}'], monkeypatch, capsys)
  assert code == 0, err
  return out.splitlines()


def metric(client: testclient.TestClient, name: str) -> float:
  text = client.get('/metrics').text
  return sum(float(value) for value in re.findall(rf'^{re.escape(name)}(?:{{.*}})? (\S+)$',
                                                  text, re.M))


def test_answers_are_translate_py_s_whatever_shares_their_batch(exported, tmp_path,
                                                                monkeypatch, capsys):
  expected = {direction: translate_py(exported, SENTENCES, tmp_path, monkeypatch, capsys,
                                      direction=direction) for direction in DIRECTIONS}
  assert len(set(expected[DIRECTIONS[0]])) >= 4 and expected[DIRECTIONS[0]] != expected[
      DIRECTIONS[1]]
  work = [(direction, s) for direction in DIRECTIONS for s in SENTENCES]

  def answer(client, direction_and_sentence, codes=('eng', 'eng_Latn', 'en')):
    direction, sentence = direction_and_sentence
    src_lang, tgt_lang = direction.split('-')
    code = codes[hash(sentence) % len(codes)]  # Any kind of code names the language.
    return client.post('/translate', json={
        'q': sentence, 'source': src_lang.replace('eng_Latn', code), 'target': tgt_lang}
        ).json()['translatedText']

  with served(exported, batch_wait_ms=200, concurrent_batches=2) as client:
    alone = [answer(client, item) for item in work]
    assert metric(client, 'translate_batch_sentences_count') == len(work)
    with concurrent.futures.ThreadPoolExecutor(len(work)) as pool:
      together = list(pool.map(lambda item: answer(client, item), work))
    # The concurrent requests of all three directions shared batches (a few of them: a
    # decoder takes at most half of those waiting, and those that came while both were
    # busy waited for one).
    assert len(work) + 2 <= metric(client, 'translate_batch_sentences_count') < len(work) + 8
    # A text is translated line by line, as translate.py translates a file.
    text = f'{SENTENCES[0]}. {SENTENCES[1]}!\n\n{SENTENCES[2]}\n'
    whole = client.post('/translate', data={'q': text, 'source': 'eng', 'target': 'ha'})
  assert alone == together == [expected[d][SENTENCES.index(s)] for d, s in work]
  lines = translate_py(exported, [f'{SENTENCES[0]}. {SENTENCES[1]}!', SENTENCES[2]],
                       tmp_path, monkeypatch, capsys)
  assert whole.json() == {'translatedText': '{}\n\n{}\n'.format(*lines)}


def test_a_line_longer_than_the_model_s_input_is_split_into_sentences(exported, tmp_path,
                                                                      monkeypatch, capsys):
  tokenizer = ctranslate2_translator.load_translator(str(exported), {}).source_tokenizer
  # The line does not fit the input (its pieces, a tag and EOS); each sentence does.
  pieces = len(tokenizer.encode(' '.join(SENTENCES)))
  translator = ctranslate2_translator.load_translator(str(exported),
                                                      {'max_input_length': pieces})
  settings = app.ServerSettings()
  with testclient.TestClient(app.translator_app(translator, str(exported), settings)) as client:
    answer = client.post('/translate', json={'q': '. '.join(SENTENCES), 'source': 'en',
                                             'target': 'ha'}).json()
  sentences = [f'{s}.' for s in SENTENCES[:-1]] + SENTENCES[-1:]
  assert answer == {'translatedText': ' '.join(
      translate_py(exported, sentences, tmp_path, monkeypatch, capsys))}


def test_a_run_folder_is_served_as_translate_py_translates_it(exported, tmp_path,
                                                              monkeypatch, capsys):
  """The JAX model takes each row's direction: concurrent requests of three directions
  share its batches, and each gets translate.py's translation of its line."""
  run = exported.parent / 'run'
  translator = run_loading.load_model(str(run), None, None, {})
  batch_directions = []
  run_batch = translator._run_batch  # pylint: disable=protected-access

  def recording_run_batch(encoder_ids, prefix_ids, directions):
    batch_directions.append(set(directions))
    return run_batch(encoder_ids, prefix_ids, directions)
  translator._run_batch = recording_run_batch  # pylint: disable=protected-access
  work = [(direction, s) for direction in DIRECTIONS for s in SENTENCES]
  settings = app.ServerSettings(batch_wait_ms=200)
  with testclient.TestClient(app.translator_app(translator, str(run), settings)) as client:
    with concurrent.futures.ThreadPoolExecutor(len(work)) as pool:
      together = list(pool.map(lambda item: client.post('/translate', json={
          'q': item[1], 'source': item[0].split('-')[0],
          'target': item[0].split('-')[1]}).json()['translatedText'], work))
  assert len(batch_directions) < len(work) and max(map(len, batch_directions)) > 1
  expected = {direction: translate_py(run, SENTENCES, tmp_path, monkeypatch, capsys,
                                      '--checkpoint_dir', direction)
              for direction in DIRECTIONS}
  assert together == [expected[d][SENTENCES.index(s)] for d, s in work]


def test_libretranslate_api(exported):
  with served(exported) as client:
    languages = client.get('/languages').json()
    assert languages == [{'code': 'en', 'name': 'English', 'targets': ['fr', 'ha']},
                         {'code': 'fr', 'name': 'French', 'targets': []},
                         {'code': 'ha', 'name': 'Hausa', 'targets': ['en', 'fr']}]
    listed = client.post('/translate', json={'q': SENTENCES[:2], 'source': 'auto',
                                             'target': 'hau_Latn', 'format': 'text'}).json()
    one = [client.post('/translate', json={'q': s, 'source': 'en', 'target': 'ha'}
                       ).json()['translatedText'] for s in SENTENCES[:2]]
    assert listed['translatedText'] == one
    assert [d['language'] for d in listed['detectedLanguage']] == ['en', 'en']
    assert client.get('/health').json() == {'status': 'ok', 'queued': 0}
    assert client.get('/').text.count('<select') == 2
    assert metric(client, 'translate_requests_total') == 3
    assert metric(client, 'translate_queue_sentences') == 0


@pytest.mark.parametrize('request_fields, status, message', [
    ('{"q": "Monday", "source": "en"', 400, 'the body is not valid JSON'),
    ({'q': 'Monday', 'source': 'xx', 'target': 'ha'}, 400,
     "source: 'xx' is no ISO 639-1, ISO 639-3 or FLORES-200 language code"),
    ({'q': 'Litinin', 'source': 'ha', 'target': 'de'}, 400,
     'target: the model does not translate into deu_Latn'),
    ({'q': 'Monday', 'source': 'fr', 'target': 'ha'}, 400,
     'source: the model does not translate from fra_Latn'),
    ({'q': 'Monday', 'target': 'ha'}, 400, 'source: missing'),
    ({'q': 7, 'source': 'en', 'target': 'ha'}, 400, 'q: give a text'),
    ({'q': 'x' * 31, 'source': 'en', 'target': 'ha'}, 413,
     'q: 31 characters, over the limit of 30 per request (--char_limit)'),
    ({'q': ['abcdefgh'] * 300, 'source': 'en', 'target': 'ha'}, 413,
     'over the limit of 2000 (--max_request_bytes)'),
    ({'q': ['One', 'Two', 'Three', 'Four', 'Five'], 'source': 'en', 'target': 'ha'}, 413,
     'q: 5 sentences, over the limit of 4 waiting (--max_queue)'),
])
def test_bad_requests_get_one_clear_error(exported, request_fields, status, message):
  with served(exported, char_limit=30, max_request_bytes=2000, max_queue=4) as client:
    if isinstance(request_fields, str):
      answer = client.post('/translate', content=request_fields,
                           headers={'Content-Type': 'application/json'})
    else:
      answer = client.post('/translate', json=request_fields)
  assert answer.status_code == status
  assert message in answer.json()['error'], answer.json()


def test_a_full_queue_answers_503_with_retry_after(exported):
  with served(exported, max_queue=4, batch_wait_ms=3000) as client:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      waiting = pool.submit(client.post, '/translate', json={
          'q': ['One', 'Two', 'Three'], 'source': 'en', 'target': 'ha'})
      deadline = time.monotonic() + 10
      while client.get('/health').json()['queued'] < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
      refused = client.post('/translate', json={'q': ['Four', 'Five'], 'source': 'en',
                                                'target': 'ha'})
      assert waiting.result().status_code == 200
  assert refused.status_code == 503 and refused.headers['Retry-After'] == '1'
  assert refused.json() == {
      'error': 'the server is busy (3 sentences are waiting, at most 4); try again'}


def free_port() -> int:
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


@pytest.fixture(scope='module')
def server(exported, tmp_path_factory):
  """launch/serve.py over the export, as a user starts it; stopped by the last test."""
  port = free_port()
  log = tmp_path_factory.mktemp('server') / 'stderr'
  with open(log, 'w', encoding='utf-8') as stderr:
    process = subprocess.Popen(
        [sys.executable, str(LAUNCH / 'serve.py'), f'--ctranslate2={exported}',
         f'--port={port}', '--batch_wait_ms=300', '--max_queue=10000'],
        env=command_environment(), stderr=stderr, stdout=subprocess.DEVNULL)
  url = f'http://127.0.0.1:{port}/'
  deadline = time.monotonic() + 120
  while True:
    try:
      urllib.request.urlopen(url + 'health', timeout=5)
      break
    except OSError:
      assert process.poll() is None and time.monotonic() < deadline, log.read_text()
      time.sleep(0.2)
  yield process, url
  if process.poll() is None:
    process.kill()
    process.wait()


def post(url: str, fields: dict, timeout: float = 60) -> dict:
  request = urllib.request.Request(url + 'translate', json.dumps(fields).encode(),
                                   {'Content-Type': 'application/json'})
  with urllib.request.urlopen(request, timeout=timeout) as answer:
    return json.load(answer)


def test_libretranslate_s_own_client_works_unchanged(server, exported, tmp_path,
                                                     monkeypatch, capsys):
  _, url = server
  client = libretranslatepy.LibreTranslateAPI(url)
  assert [language['code'] for language in client.languages()] == ['en', 'fr', 'ha']
  assert client.detect('one two three four five six seven')[0]['language'] == 'en'
  assert [client.translate(s, 'en', 'ha') for s in SENTENCES[:3]] == translate_py(
      exported, SENTENCES[:3], tmp_path, monkeypatch, capsys)


def test_a_client_that_leaves_cancels_its_queued_sentences(server):
  _, url = server
  before = urllib.request.urlopen(url + 'metrics').read().decode()
  body = json.dumps({'q': 'Monday. Tuesday.', 'source': 'en', 'target': 'ha'}).encode()
  with socket.create_connection(('127.0.0.1', int(url.split(':')[-1].strip('/')))) as sock:
    sock.sendall(b'POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json'
                 b'\r\nContent-Length: %d\r\n\r\n%s' % (len(body), body))
    time.sleep(0.1)  # Queued, within the batch's 300 ms wait.
  time.sleep(0.6)
  after = urllib.request.urlopen(url + 'metrics').read().decode()
  count = lambda text, name: float(re.search(rf'^{name} (\S+)$', text, re.M).group(1))
  assert count(after, 'translate_sentences_total') == count(before, 'translate_sentences_total')
  assert 'translate_requests_total{status="499"} 1.0' in after


def test_the_page_translates_in_a_headless_browser(server):
  _, url = server
  options = webdriver.ChromeOptions()
  options.binary_location = '/usr/bin/chromium'
  for flag in ('--headless=new', '--no-sandbox', '--disable-dev-shm-usage'):
    options.add_argument(flag)
  browser = webdriver.Chrome(options=options,
                             service=webdriver.ChromeService('/usr/bin/chromedriver'))
  try:
    browser.get(url)
    wait = ui.WebDriverWait(browser, 30)
    wait.until(lambda b: b.find_element('tag name', 'body').get_attribute('data-ready'))
    assert ui.Select(browser.find_element('id', 'source')).first_selected_option.get_attribute(
        'value') == 'en'
    browser.find_element('id', 'text').send_keys(SENTENCES[2])
    browser.find_element('id', 'translate').click()
    wait.until(lambda b: b.find_element('id', 'output').text)
    target = ui.Select(browser.find_element('id', 'target')).first_selected_option
    assert target.get_attribute('value') == 'fr'
    expected = post(url, {'q': SENTENCES[2], 'source': 'en', 'target': 'fr'})
    assert browser.find_element('id', 'output').text == expected['translatedText']
    browser.find_element('id', 'swap').click()  # fr -> en: the model has no such direction.
    assert 'does not translate' in browser.find_element('id', 'error').text
  finally:
    browser.quit()


def test_sigterm_under_load_answers_every_accepted_request(server):
  """Last in this file: it stops the server."""
  process, url = server
  fields = [{'q': f'{s} {i}', 'source': 'en', 'target': 'ha'}
            for i in range(40) for s in SENTENCES[:2]]
  with concurrent.futures.ThreadPoolExecutor(len(fields)) as pool:
    answers = [pool.submit(post, url, f) for f in fields]
    time.sleep(0.2)  # Every request sent, most waiting in the batcher.
    process.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # uvicorn has seen the signal and closed its socket.
    late = pool.submit(post, url, fields[0])
    results = [future.exception() or future.result() for future in answers + [late]]
  assert process.wait(timeout=60) == 0
  accepted = [r for r in results if isinstance(r, dict)]
  assert len(accepted) >= len(fields) // 2, results
  assert all(isinstance(r['translatedText'], str) for r in accepted)
  # The others were refused a connection, none cut off once accepted; so was one sent
  # after the signal.
  assert all(isinstance(r, urllib.error.URLError) and isinstance(r.reason, ConnectionRefusedError)
             for r in results if not isinstance(r, dict)), results
  assert not isinstance(results[-1], dict)
