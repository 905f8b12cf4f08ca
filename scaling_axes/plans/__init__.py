"""The scales' pre-registered analysis plans (`<scale>.yaml`), package data read by `harness.analysis.plan`."""
