"""Where a trial runs: the seam between the trial (`trials/`) and the service (`service/`).

`base.py` is the interface (`Executor`, `TrialRun`, `TrialEvents`, `executor_for`);
`local.py` runs trials in this process on a backend; `placed.py` and `node_trial.py` run them
whole on a cluster's nodes through a `Placement` (`placement.py`), and `ray/` is Ray's (the
only part that imports Ray, loaded when a config names a cluster).
"""
