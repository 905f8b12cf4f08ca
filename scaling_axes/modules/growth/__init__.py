"""Growing a trained model into a bigger one: Net2Net for the Transformer, appended parameter tokens for Tokenformer.
Each architecture names its growth function in its registration; it is imported when used."""
