"""Local fakes of the services agentwatch talks to, speaking their real wire protocols."""
