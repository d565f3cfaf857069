"""`python -m kfoundry ...` runs the `kfoundry` command (useful where the package is not installed)."""

from kfoundry.cli import main

main()
