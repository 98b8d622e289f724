"""The shape of 00_environment.json."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.checks import Environment
from workbench.environment.drift import CRITICAL, Drift, worst_severity
from workbench.environment.releases import ReleaseMatch
from workbench.scorecard import ATTENTION, BLOCKER, Finding, Status, Verdict, judge

ENVIRONMENT_RULE = (
    "blocker: critical drift from the pinned manifest; attention: other drift from it, or Neuron "
    "packages that match no published release (partial or unknown combination); pass otherwise"
)


def environment_verdict(release: ReleaseMatch, drifts: Sequence[Drift] | None) -> Verdict:
    """Notebook 00's verdict, by ENVIRONMENT_RULE."""
    findings = []
    for drift in drifts or []:
        status: Status = BLOCKER if drift.severity == CRITICAL else ATTENTION
        findings.append(
            Finding(
                status,
                f"{drift.severity} drift: {drift.key} {drift.old} -> {drift.new}",
                Environment.DRIFT,
            )
        )
    if release.status in ("partial", "unknown-combination"):
        findings.append(
            Finding(
                ATTENTION,
                f"release check {release.status}: {release.explanation}",
                Environment.RELEASE,
            )
        )
    if drifts is None:
        settled = "no pinned manifest to compare with"
    else:
        settled = "no drift from the pinned manifest"
    pass_reason = f"{settled}; release check: {release.status}"
    return judge(findings, ENVIRONMENT_RULE, pass_reason)


def result_data(
    manifest: dict[str, Any],
    release: ReleaseMatch,
    drifts: Sequence[Drift] | None,
    broken: Sequence[Drift] = (),
) -> dict[str, Any]:
    """The 00_environment.json payload, headline first; `broken` are `import_failures`."""
    torch_version = manifest["packages"].get("torch", "not installed")
    if drifts is None:
        drift_text = "no pinned manifest"
    else:
        worst = worst_severity(list(drifts)) or "none"
        drift_text = f"{len(drifts)} change(s) since the pin, worst {worst}"
    imports = ""
    if broken:
        first = broken[0]
        imports = (
            f"; CRITICAL: {len(broken)} companion package(s) fail to import "
            f"({first.key.removeprefix('imports.')}: {first.new})"
        )
    return {
        "headline": f"torch {torch_version}; {manifest['neuron']['summary']}; "
        f"release check: {release.status}; {drift_text}{imports}.",
        "manifest": manifest,
        "release": release,
        "drift": None if drifts is None else list(drifts),
        "verdict": environment_verdict(release, drifts),
        "import_failures": list(broken),
    }
