"""Ray's nodes as the place trials run: each trial placed on a node with room for it
(`placement`), each node's Docker engine driven by a long-lived actor there (`host`), the
driver's view of the nodes (`fleet`), task folders shipped once per content (`parcels`),
and the nodes' images and leftovers (`nodes`, `cluster`).

Every module here imports Ray; `executors.base.executor_for` loads them only when a config
names a cluster (`RayBackendConfig`, whose module imports no Ray), so without one Ray is
never imported (the `ray` extra).
"""
