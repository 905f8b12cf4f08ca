"""The LightningModules that train the models (language model, image classifier), their optimisers and the
GPU-path helpers (precision, fused gradient clipping)."""
