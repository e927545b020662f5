"""The Ray cluster's config, re-exported (`config.RayBackendConfig`; its home is
`orchestrator/sandbox/backend_config.py`), light: no Ray import.

Ray is not a sandbox backend: a cluster's trials run whole on its nodes, through the
executor in `orchestrator/executors/ray/` (which imports Ray, and only when a config names a
cluster). The config is a member of `TrialConfig.backend`'s union, so job files and
config.json keep naming it as `backend = {type = "ray"}`.
"""
