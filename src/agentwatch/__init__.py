"""agentwatch: an engine for running LLM agents that can be watched."""

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]
