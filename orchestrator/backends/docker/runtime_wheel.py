"""`container_runtime` as a small wheel, packed here deterministically, so its bytes (and the
image tags that depend on them) change only when its source does. The runtime layer installs
it offline next to the host's wheelhouse (`orchestrator/common/wheelhouse.py`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

import container_runtime

RUNTIME_DIST = "trialbox_container_runtime"
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def runtime_wheel() -> tuple[str, bytes]:
    """`container_runtime` as a pure-Python wheel (file name, bytes), with fixed timestamps.

    Built in memory: nothing shared is written, so concurrent processes cannot see half a file.
    """
    version = container_runtime.__version__
    source = Path(container_runtime.__file__).parent
    dist_info = f"{RUNTIME_DIST}-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted(source.rglob("*.py")):
        files[f"container_runtime/{path.relative_to(source).as_posix()}"] = path.read_bytes()
    files[f"{dist_info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {RUNTIME_DIST.replace('_', '-')}\n"
        f"Version: {version}\n"
        f"Requires-Python: >={'.'.join(map(str, container_runtime.MIN_PYTHON))}\n"
        "Requires-Dist: pydantic>=2,<3\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: trialbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return f"{RUNTIME_DIST}-{version}-py3-none-any.whl", buffer.getvalue()
