"""The machinery every table shares: runs and budgets, training, results rows, evaluation, growth, LightningCLI."""
