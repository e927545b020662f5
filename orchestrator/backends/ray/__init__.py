"""The Ray backend: trials placed on the nodes of a Ray cluster, each node's Docker engine
driven by a long-lived actor on that node.

`config` is light (no Ray import); everything else imports Ray and is loaded only when a
`RayBackendConfig` is built, so without it Ray is never imported (the `ray` extra).
"""
