"""One run, from its launch to its record: the launch resolved once (`launch`), the run's life in one function
(`lifecycle.train`), its directory and lock (`rundir`), the Trainer and its tasks, callbacks, loggers, the metrics
CSV, growth, and the record it leaves (`record`)."""
