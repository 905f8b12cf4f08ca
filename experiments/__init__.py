"""One script per paper table or figure, and the shared runner (`experiments.runner`)."""
