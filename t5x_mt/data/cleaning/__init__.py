"""Cleaning parallel text: filter steps, the pipeline that chains them, and its engines.

`steps` defines the step protocol and the rule filters (`batches` holds the numpy views
they decide batches with); `dedup`, `langid` and `mdl` add the steps that need more than
one pair or a model. `io` reads inputs in chunks and writes the clean corpus folder,
`pipeline` runs the chosen steps over the chunks locally, and `beam` runs them on Apache
Beam with the same decisions.
"""
