"""The relay: supervises the agent's process inside a sandbox (docs/architecture.md, "The
relay's policy").

It imports nothing of trialbox's: it drives any sandbox that satisfies `RelaySandbox`, with
commands that are values (`relay.commands`) a backend renders to its shell or answers by kind.
"""

from relay.commands import GroupState
from relay.outcome import Ending, RelayOutcome, RelayPolicy
from relay.protocol import Command, ExecOutput, HostStoppable, RelaySandbox
from relay.supervisor import Relay

__all__ = [
    "Command",
    "Ending",
    "ExecOutput",
    "GroupState",
    "HostStoppable",
    "Relay",
    "RelayOutcome",
    "RelayPolicy",
    "RelaySandbox",
]
