"""What a scan found: findings, the report over all files, and their one-line form."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.scan.rules import BLOCKING, SEVERITIES


@dataclass(frozen=True)
class ScanFinding:
    path: str
    line: int
    rule: str
    pattern: str
    code: str  # the source line, stripped
    severity: str  # the worst over the chosen flavours
    native_severity: str | None
    xla_severity: str | None
    native: str  # replacement on native TorchNeuron
    xla: str  # replacement on legacy XLA
    how: str  # "ast" or "regex"

    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class ScanReport:
    roots: list[str]
    flavours: list[str]
    files: int = 0
    findings: list[ScanFinding] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    # Definitions in the workload's files that it never uses (another model in the same module)
    left_out: list[str] = field(default_factory=list)

    @property
    def blocking(self) -> list[ScanFinding]:
        return [f for f in self.findings if f.severity == BLOCKING]

    def sentence(self) -> str:
        if not self.findings:
            return f"No CUDA-specific code found in {self.files} file(s)."
        counts = {s: sum(1 for f in self.findings if f.severity == s) for s in SEVERITIES}
        text = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return f"{len(self.findings)} finding(s) in {self.files} file(s): {text}."


def format_finding(finding: ScanFinding) -> str:
    replacements = [
        f"{label}: {text}"
        for label, text, severity in (
            ("native", finding.native, finding.native_severity),
            ("xla", finding.xla, finding.xla_severity),
        )
        if severity
    ]
    return (
        f"{finding.location()}: {finding.severity} [{finding.rule}] {finding.pattern}\n"
        f"    {finding.code}\n" + "".join(f"    -> {r}\n" for r in replacements)
    )
