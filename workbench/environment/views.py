"""What notebook 00 shows of a manifest, a release match and a drift list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.environment.drift import CRITICAL, Drift, worst_severity
from workbench.environment.releases import ReleaseMatch
from workbench.environment.rollback import Rollback

# The packages a migration decision turns on, shown first; the full list is in the result file.
KEY_PACKAGES = (
    "torch", "torch-neuronx", "torch-xla", "neuronx-cc", "libneuronxla", "nki", "numpy",
    "papermill", "nbconvert", "ipykernel", "ipywidgets", "matplotlib",
)  # fmt: skip


def manifest_overview(manifest: dict[str, Any]) -> None:
    torch_info, python, cpu = manifest["torch"], manifest["python"], manifest["cpu"]
    display(
        show.key_values(
            {
                "python": f"{python['version']} ({python['implementation']})",
                "os": manifest["platform"]["platform"],
                "libc": f"{manifest['libc']['name']} {manifest['libc']['version']}",
                "cpu": f"{cpu['model']}, {cpu['logical_cores']} logical cores",
                "memory": f"{cpu['memory_total_bytes'] / 2**30:.1f} GiB",
                "Neuron stack": manifest["neuron"]["summary"],
                "neuron-ls": manifest["neuron"]["neuron_ls"]["status"],
                "installed distributions": len(manifest["packages"]),
            },
            caption="Machine and stack",
        )
    )
    packages = manifest["packages"]
    display(
        show.table(
            [[name, packages.get(name, "not installed")] for name in KEY_PACKAGES],
            headers=["package", "version"],
            caption="Key packages",
        )
    )
    settings = {
        key: torch_info.get(key)
        for key in (
            "num_threads", "num_interop_threads", "deterministic_algorithms",
            "float32_matmul_precision", "cuda_matmul_allow_tf32", "cudnn_allow_tf32",
        )
    }  # fmt: skip
    display(show.key_values(settings, caption="torch numeric settings"))
    env = manifest["environment"]
    if env:
        display(
            show.table(
                sorted(env.items()),
                headers=["variable", "value"],
                caption="Environment variables that change behaviour (redacted)",
            )
        )
    else:
        display(show.banner("No behaviour-changing environment variables are set.", "info"))


def import_report(manifest: dict[str, Any], broken: Sequence[Drift]) -> None:
    """Each installed companion package and whether it imports in a fresh process."""
    imports = manifest.get("imports") or {}
    if not imports:
        display(show.banner("No torch companion package is installed; nothing to import.", "info"))
        return
    if broken:
        names = ", ".join(d.key.removeprefix("imports.") for d in broken)
        display(
            show.banner(
                f"Critical: {names} installed but failing to import. A wheel built for another "
                "torch (e.g. a CUDA torchvision beside a CPU torch) fails like this, and takes "
                "the packages that import it down too.",
                "fail",
            )
        )
    else:
        display(show.banner(f"All {len(imports)} installed companion package(s) import.", "ok"))
    display(
        show.table(
            [
                [name, manifest["packages"].get(name, ""), status]
                for name, status in imports.items()
            ],
            headers=["package", "version", "import in a fresh process"],
        )
    )


_RELEASE_KIND = {"match": "ok", "partial": "warn", "unknown-combination": "fail"}


def release_verdict(release: ReleaseMatch) -> None:
    display(show.banner(release.explanation, _RELEASE_KIND.get(release.status, "info")))
    if release.checks:
        display(
            show.table(
                [
                    [c.package, c.expected, c.installed or "not installed", "yes" if c.ok else "NO"]
                    for c in release.checks
                ],
                headers=["package", "published", "installed", "matches"],
            )
        )
    for row in release.releases:
        display(
            show.key_values(
                {"release": row.neuron_release, "date": row.date, "source": row.source},
                caption="Release matrix row",
            )
        )


def drift_report(drifts: Sequence[Drift] | None) -> None:
    if drifts is None:
        display(
            show.banner(
                "No pinned manifest given: drift not checked "
                "(pass -p pinned_manifest=PATH from `workbench env pin`).",
                "info",
            )
        )
        return
    if not drifts:
        display(show.banner("No change since the pinned manifest.", "ok"))
        return
    worst = worst_severity(list(drifts))
    kind = "fail" if worst == CRITICAL else "warn" if worst == "warning" else "info"
    display(
        show.banner(f"{len(drifts)} change(s) since the pinned manifest; worst: {worst}.", kind)
    )
    display(
        show.table(
            [[d.severity, d.key, d.old, d.new, d.reason] for d in drifts],
            headers=["severity", "what", "pinned", "now", "why"],
        )
    )


def rollback_report(way_back: Rollback | None) -> None:
    """How to return to the pinned environment, what that can verify, what pip cannot restore."""
    if way_back is None:
        display(
            show.banner(
                "No pinned manifest given: there is no recorded environment to go back to "
                "(`workbench env pin --out pinned.json`, then -p pinned_manifest=pinned.json).",
                "info",
            )
        )
        return
    if way_back.verifiable:
        verified = (
            f"Every one of the {way_back.pinned} pinned versions has the hash of its file: a "
            "restore installs exactly those files or refuses before changing anything."
        )
        kind = "ok"
    elif not way_back.hashed:
        verified = (
            "The pin holds no hashes (pinned with --no-hashes): `workbench env restore` refuses "
            "it; pin the known-good environment again with hashes."
        )
        kind = "warn"
    else:
        verified = (
            f"{way_back.hashed} of {way_back.pinned} pinned versions have a hash; a restore that "
            "needs one of the others refuses it (below, why each has none)."
        )
        kind = "warn"
    display(show.banner(verified, kind))
    display(
        show.key_values(
            {
                "check first (changes nothing)": way_back.dry_run,
                "restore": way_back.command,
                "it would install": f"{way_back.to_install} pinned version(s)",
                "it would remove": f"{way_back.to_remove} package(s) the pin does not list",
            },
            caption="Rolling back with pip",
        )
    )
    if way_back.unhashed:
        display(
            show.table(
                sorted(way_back.unhashed.items()),
                headers=["package", "why the pin has no hash"],
                caption="Pinned without a hash",
            )
        )
    display(
        show.table(
            [[line] for line in way_back.not_pip],
            headers=["pip cannot restore these: restore them with the OS or the image"],
        )
    )
