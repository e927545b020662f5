"""The relay: supervises the agent's process inside a sandbox (see DESIGN.md, "The relay").

It imports nothing of trialbox's. Until it lands, trials bound the agent with an exec timeout.
"""
