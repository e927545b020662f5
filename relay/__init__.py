"""The relay: supervises the agent's process inside a sandbox (docs/architecture.md, "The
relay's policy").

It imports nothing of trialbox's: it drives any sandbox that satisfies `RelaySandbox`.
"""

from relay.outcome import Ending, RelayOutcome, RelayPolicy
from relay.protocol import ExecOutput, HostStoppable, RelaySandbox
from relay.supervisor import GroupState, Relay

__all__ = [
    "Ending",
    "ExecOutput",
    "GroupState",
    "HostStoppable",
    "Relay",
    "RelayOutcome",
    "RelayPolicy",
    "RelaySandbox",
]
