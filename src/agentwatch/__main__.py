"""`python -m agentwatch` runs the command line, as the `agentwatch` script does."""

from agentwatch.cli import main

main()
