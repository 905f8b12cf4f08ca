"""One module per paper table or figure, grouped per paper; each declares an `EXPERIMENT`."""
