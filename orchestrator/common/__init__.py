"""What every layer shares, importing nothing else of trialbox's (stdlib and pydantic only).

The exception tree with each error's category (`errors`), the id grammar (`ids`), the
framework's own bounds (`limits`), the defaults `--help` shows (`defaults`), host work off the
loop (`offload`), cleanup that rides out cancels (`shielding`), secret scrubbing (`scrub`),
archives in and out of sandboxes (`archive`), files written whole (`atomic_write`), the host's
packaging tools (`wheelhouse`), and small helpers (`lazy`, `suggest`, `terminal`, `offline`,
`host_storage`).
"""
