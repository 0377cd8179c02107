"""The runtime: the engine, the roster of agent definitions, session drivers, the turn loop, tools and models."""
