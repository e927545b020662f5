"""Every timeout and cap trialbox applies on its own, in one typed object.

A task's own limits (agent and verifier timeouts, cpus, memory) come from its task.toml;
these are the framework's: how long stopping an agent may take, how far a host-side wait
outlives the in-sandbox timeout, how much of a log file comes back. One object, so a reader
sees every bound at once and a test can tighten one without patching module constants.

`Limits` is frozen and lives on `TrialConfig.limits`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """The framework's bounds, in seconds and bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Stopping the agent after its framework timeout (the relay's policy).
    stop_term_grace_sec: float = Field(
        20.0, gt=0, description="After the agent timeout: seconds the leader gets after TERM."
    )
    stop_kill_grace_sec: float = Field(
        10.0, gt=0, description="Then: seconds to confirm the leader's end after KILL."
    )
    stop_host_sec: float = Field(
        15.0,
        gt=0,
        description="Every pid taken: seconds to kill every process from the host and see the "
        "leader's end, on top of the graces.",
    )
    # One command in a sandbox.
    exec_kill_after_sec: float = Field(
        5.0, gt=0, description="Inside the sandbox: KILL this long after a timed-out TERM."
    )
    exec_host_backstop_sec: float = Field(
        15.0, gt=0, description="The host's wait outlives the in-sandbox timeout by this much."
    )
    exec_output_cap_bytes: int = Field(
        1024 * 1024, gt=0, description="An exec's merged output is cut here."
    )
    # Files coming back.
    log_file_cap_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Each file copied back from /logs is cut here."
    )
    # The trial's own steps.
    verifier_setup_sec: float = Field(
        30.0, gt=0, description="Emptying /logs/verifier and /tests before the verifier."
    )
    collect_sec: float = Field(300.0, gt=0, description="Copying /logs back to the host.")
    teardown_sec: float = Field(60.0, gt=0, description="Removing the sandbox.")
    # A sandbox's disk.
    storage_max_mb: int | None = Field(
        None,
        gt=0,
        description="The most disk any sandbox may write (MiB): a task's storage_mb above it "
        "is clipped, with a warning. None: the task's own (Harbor's 10240 when it says none).",
    )
    # A sandbox's life.
    create_settle_sec: float = Field(
        60.0, gt=0, description="After a failed or cancelled create: wait for it to settle."
    )
    destroy_settle_sec: float = Field(
        60.0, gt=0, description="A removal runs this long at most while cancels arrive."
    )
