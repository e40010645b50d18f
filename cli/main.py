"""Entry point placeholder; the commands are built in the CLI issue."""


def main() -> None:
    raise SystemExit("polyloop: the command line is not built yet")
