"""Yoruba tone marks as data: the marks themselves (`yoruba_marks`), the marking lexicon
and the corpus a restoration run trains on."""
