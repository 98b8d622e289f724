"""Write the committed run for the current schema: `python -m tests.contract.write_samples`.

Run it only when SCHEMA_VERSION changes: the files stand for the history users already have, so
rewriting them for the same version would hide exactly the break the contract tests catch."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from tests.contract.test_result_contract import SAMPLES
from tests.fixtures.real_runs import write_real_run

KEEP = ("summary.json",)


def main() -> int:
    if SAMPLES.exists():
        print(
            f"{SAMPLES} exists: the committed run of this schema is not rewritten.", file=sys.stderr
        )
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_real_run(Path(scratch) / "run", "2026-12-05T08:00:00")
        SAMPLES.mkdir(parents=True)
        for path in sorted(folder.iterdir()):
            if path.suffix == ".json" or path.name in KEEP:
                shutil.copy2(path, SAMPLES / path.name)
                print(f"wrote {SAMPLES / path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
