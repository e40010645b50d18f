"""`python -m polyloop`: the command line.

This is the only place the library package touches the CLI, and only when
run as a program: `import polyloop` never imports typer or rich.
"""

from polyloop_cli.entry import main

if __name__ == "__main__":
    main()
