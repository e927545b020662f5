"""The Docker backend: the engine boundary, containers as sandboxes, task images, leftovers.

`config` is light (no Docker import); everything else talks to the engine through `api`.
"""
