"""`python -m agentwatch.cli` runs the command line."""

from agentwatch.cli import main

main()
