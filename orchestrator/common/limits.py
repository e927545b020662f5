"""Every timeout and cap trialbox applies on its own, in one typed object.

A task's own limits (agent and verifier timeouts, cpus, memory) come from its task.toml;
these are the framework's: how long stopping an agent may take, how far a host-side wait
outlives the in-sandbox timeout, how much of a log file comes back. One object, so a reader
sees every bound at once and a test can tighten one without patching module constants.

`Limits` is frozen and lives on `TrialConfig.limits`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Linux's MAX_ARG_STRLEN (32 pages of 4 KiB), less its NUL: no one argument of an exec is
# longer, so no session command (passed whole to `sh -c`) may be either.
MAX_ARG_BYTES = 32 * 4096 - 1


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
    # A session's calls (trials/session.py): what one call may move in or out.
    session_command_cap_bytes: int = Field(
        64 * 1024,
        gt=0,
        le=MAX_ARG_BYTES,
        description="A session command's text (or its argv joined) is refused past this "
        f"(UTF-8 bytes); at most {MAX_ARG_BYTES}, the longest argument Linux passes to sh -c.",
    )
    session_output_cap_bytes: int = Field(
        1024 * 1024,
        gt=0,
        description="A session command's merged output is cut here (its answer says `truncated`).",
    )
    session_write_cap_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="The most one write_file of a session takes."
    )
    session_read_cap_bytes: int = Field(
        16 * 1024 * 1024,
        gt=0,
        description="The most one read_file of a session returns (its max_bytes default, and "
        "its ceiling).",
    )
    session_trajectory_output_cap_bytes: int = Field(
        16 * 1024,
        ge=0,
        description="Each command's output is cut here in the session's agent/trajectory.json "
        "(the caller gets it whole, up to session_output_cap_bytes).",
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
