"""The papers' published numbers, each with its source: package data, read by `harness.results.published`."""
