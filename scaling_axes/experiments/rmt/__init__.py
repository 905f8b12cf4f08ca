"""The Residual Matrix Transformer paper's tables and figures, and their shared setup (`setup`)."""
