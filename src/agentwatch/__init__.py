"""agentwatch: an engine for running LLM agents that can be watched."""

from agentwatch.runtime.extensions import register_default_extension

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]

# Observer agents come with every engine (the `observers.enabled` switch and AGENTWATCH_OBSERVER_AGENTS turn them
# off); they are named by spec so that importing agentwatch stays light and the runtime never imports watchers.
register_default_extension("agentwatch.watchers:ObserverAgents")
