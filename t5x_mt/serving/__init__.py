"""A model behind an HTTP API (launch/serve.py): LibreTranslate's API, a web page to try
it, and dynamic batching of many clients' sentences.

  segmenting  a text as sentences and what joins them, and the text again from their
              translations
  batching    the queue of pending sentences and the batcher that decodes them together,
              several batches at once, off the event loop
  app         the Starlette application: routes, languages, limits, metrics
  page.html   the web page served at /

May import every package but pretrained.
"""
