"""One trial, from a task folder to its `result.json`: the phases, the agents, the verifier,
the category rules, and the link to the model gateway.

`trial.py` holds `Trial`, one class read top to bottom; its collaborators are split by idea
(the task's copy, the execution context, readiness, the relay's guard, the verifier, rewards,
faults, the log collector, the verdict, the result file). `config.py`
(`TrialConfig`), `result.py` (`TrialResult`) and `spec.py` (`TrialSpec`, `trial.json`) are the
contracts other layers read. The trial reaches a sandbox only through `orchestrator.sandbox`,
which also holds the configs `TrialConfig.backend` names (`sandbox/backend_config.py`); this
package imports no backend (tests/test_layering.py), so a `Trial` is given its `Backend`, and
`run_trial`, which builds the one a config names, is `orchestrator/executors/local.py`'s.
"""
