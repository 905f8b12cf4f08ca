from scaling_axes.cli import cli

cli()
