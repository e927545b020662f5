"""The rollout service: the `TrialEngine` that the Python API, `trialbox run` and `trialbox
serve` share, the jobs run on it, prewarm and abort, and the HTTP server.

`engine.py` is the lifecycle (admit, load, hold a slot, run, settle, cancel, shut down); the
parts with rules of their own sit beside it (admission, the book of rollouts, tombstones, long
polls, the orphan timer, retries, callbacks). `job.py` runs and resumes jobs, writing their
folders through `orchestrator.jobs`; `server.py` and `http_protocol.py` serve the engine over
HTTP. Trials run through an `Executor` (`orchestrator.executors`), never a backend directly.
"""
