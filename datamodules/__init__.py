"""Data: tokenizers, corpora tokenized once into flat memmaps, and the LightningDataModules that sample them."""

from scaling_axes.datamodules.corpora import CORPORA, prepare_corpus
from scaling_axes.datamodules.text import TextDataModule
from scaling_axes.modules.tokenizers import load_tokenizer

__all__ = ["CORPORA", "TextDataModule", "load_tokenizer", "prepare_corpus"]
