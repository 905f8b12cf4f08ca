"""The cross-architecture comparison: shapes matched in parameters (`setup`) and the ranking table."""
