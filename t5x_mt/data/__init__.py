"""Corpora, cleaning, vocabularies and sampling for multilingual translation."""
