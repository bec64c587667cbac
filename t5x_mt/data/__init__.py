"""Corpora, cleaning, vocabularies, tags, sampling, in-domain selection and input
pipelines for multilingual translation.

May import core only.
"""
