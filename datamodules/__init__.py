"""Data: tokenizers, corpora tokenized once into flat memmaps, and the LightningDataModules that sample them."""

from datamodules.corpora import CORPORA, prepare_corpus
from datamodules.text import TextDataModule
from datamodules.tokenizers import load_tokenizer

__all__ = ["CORPORA", "TextDataModule", "load_tokenizer", "prepare_corpus"]
