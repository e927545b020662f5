"""A second Docker engine on this machine, for the cluster tests: its own socket, data root,
exec root (and so its own containerd), pidfile, config file, cgroup parent and bridge (an
interface made here, without iptables rules; its sandboxes run with network mode none).
Started and stopped by a fixture; its whole state, the bridge too, goes with it.

Not `--bridge none`: dockerd 20.10 then deletes the interface `docker0` at start, the system
engine's own bridge, and every container the system engine starts afterwards fails.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import docker
import docker.errors

START_WITHIN_SEC = 60.0
STOP_WITHIN_SEC = 30.0


class SecondDockerd:
    """One `dockerd` of our own; `host` is its DOCKER_HOST."""

    def __init__(self) -> None:
        # Short: containerd's socket lives under the exec root, and unix socket paths are
        # limited to 108 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="tb-d2-", dir="/tmp"))
        self.host = f"unix://{self.root}/docker.sock"
        self.log = self.root / "dockerd.log"
        self.bridge = f"tbd2-{secrets.token_hex(3)}"  # interface names: at most 15 bytes
        self.process: subprocess.Popen[bytes] | None = None

    def _make_bridge(self) -> None:
        for step in (
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", "10.254.253.1/24", "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ):
            subprocess.run(step, check=True, capture_output=True)

    def start(self) -> docker.DockerClient:
        config = self.root / "daemon.json"
        config.write_text(json.dumps({"storage-driver": "fuse-overlayfs"}))
        self._make_bridge()
        command = [
            "dockerd", "--host", self.host, "--config-file", str(config),
            "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.root / "docker.pid"), "--bridge", self.bridge,
            "--iptables=false", "--ip-masq=false", "--cgroup-parent", "trialbox-dockerd2",
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_WITHIN_SEC
        while True:
            try:
                client = docker.DockerClient(base_url=self.host, timeout=120)
                client.ping()
                return client
            except (docker.errors.DockerException, OSError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"the second dockerd did not answer on {self.host}: {self._log_tail()}"
                    ) from None
                time.sleep(0.2)

    def load_image(self, image: str) -> None:
        """Copy a local image of the system engine into this one (no registry needed)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "-H", self.host, "load", "-q"], stdin=save.stdout, capture_output=True,
            timeout=300, check=False,
        )  # fmt: skip
        assert save.stdout is not None
        save.stdout.close()
        if save.wait(timeout=60) != 0 or load.returncode != 0:
            raise RuntimeError(f"loading {image} into {self.host} failed: {load.stderr!r}")

    def stop(self) -> None:
        """Stop the engine (its containerd with it) and remove its whole state."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_WITHIN_SEC)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_WITHIN_SEC)
        for mount in reversed(self._mounts()):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _mounts(self) -> list[str]:
        lines = Path("/proc/self/mounts").read_text().splitlines()
        return [line.split()[1] for line in lines if line.split()[1].startswith(str(self.root))]

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"
