"""Mixture of Tokenizers: the original runs' tables and the mixout comparison, over `setup`."""
