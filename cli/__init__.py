"""The `polyloop` command line (installed as the `polyloop_cli` package)."""
