"""Which EC2 instance type this process runs on, from the instance metadata service (IMDSv2).

Asked only where it can answer: on an EC2 machine (its DMI data names Amazon EC2) or where
AWS_EC2_METADATA_SERVICE_ENDPOINT points somewhere, never when AWS_EC2_METADATA_DISABLED is
true. Each request has a short timeout, so a run never waits on it; anything that goes wrong
reads as "unknown" with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "http://169.254.169.254"
TIMEOUT_S = 0.5
TOKEN_TTL_S = 60
_DMI_FILES = ("sys_vendor", "board_vendor", "product_name", "bios_vendor")
_DMI_DIR = Path("/sys/devices/virtual/dmi/id")


@dataclass(frozen=True)
class InstanceType:
    name: str | None  # e.g. trn1.32xlarge; None when unknown
    source: str  # where it came from, or why it is unknown


def _on_ec2(dmi_dir: Path = _DMI_DIR) -> bool:
    for name in _DMI_FILES:
        try:
            text = (dmi_dir / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "amazon" in text.lower():
            return True
    return False


def _request(url: str, method: str, headers: dict[str, str]) -> str:
    # urllib (with http.client and ssl) is imported only when the metadata service is asked:
    # the many readers of InstanceType never ask it.
    import urllib.request

    request = urllib.request.Request(url, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
        return response.read().decode("utf-8", errors="replace").strip()


def instance_type_from_metadata(dmi_dir: Path = _DMI_DIR) -> InstanceType:
    """The instance type IMDSv2 reports (a session token, then the instance-type path)."""
    if os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return InstanceType(None, "instance metadata disabled (AWS_EC2_METADATA_DISABLED)")
    endpoint = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "")
    if not endpoint and not _on_ec2(dmi_dir):
        return InstanceType(None, "not an EC2 instance (no EC2 DMI data)")
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    import urllib.error

    try:
        token = _request(
            f"{base}/latest/api/token",
            "PUT",
            {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
        )
        name = _request(
            f"{base}/latest/meta-data/instance-type", "GET", {"X-aws-ec2-metadata-token": token}
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return InstanceType(None, f"instance metadata not reachable ({exc})")
    if not name or len(name) > 64 or any(c.isspace() for c in name):
        return InstanceType(None, "instance metadata gave no usable instance type")
    return InstanceType(name, "EC2 instance metadata (IMDSv2)")


def resolve_instance_type(given: str) -> InstanceType:
    """The instance a user named (-p instance_type=), else what the metadata service says."""
    if given:
        return InstanceType(given, "instance_type parameter")
    return instance_type_from_metadata()
