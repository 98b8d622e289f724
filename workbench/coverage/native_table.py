"""TorchNeuron (native Neuron, Trn2/Trn3) op tables: read, write and find them.

Two sources make the same kind of table, one versioned JSON file per release:
- TorchNeuron's PyTorch API compatibility table (docs/torch_api_compatibility.md in the
  torch-neuronx repository, regenerated each release), downloaded by the user and parsed here:
  markdown tables, one per namespace (torch, torch.Tensor, torch.nn.functional, ...), each API
  row with a support value Y, CPU_FALLBACK (its limitations name the ATen op and the dtypes) or N;
- a notebook 02 run measured with target=neuron (see measured_table.py).

The files live in a user-writable folder (op_tables_dir), never inside the installed package,
and are written atomically, so a failed import leaves the earlier table as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.compile_cache.cache_dir import user_cache_dir
from workbench.errors import BadInput
from workbench.results import write_json_atomic
from workbench.targets.detect import FLAVOUR_NATIVE

ENV_OP_TABLES = "WORKBENCH_OP_TABLES"
TABLE_KIND = "workbench TorchNeuron op table"
TABLE_FORMAT = 1

STATUS_SUPPORTED = "supported"
STATUS_CPU_FALLBACK = "cpu_fallback"
STATUS_UNSUPPORTED = "unsupported"
STATUSES = (STATUS_SUPPORTED, STATUS_CPU_FALLBACK, STATUS_UNSUPPORTED)
# When two rows name the same ATen op, the more restrictive one holds for the op: a fallback or
# a rejection on one path of that op is what a migration has to plan for.
_STRICTNESS = {STATUS_SUPPORTED: 0, STATUS_CPU_FALLBACK: 1, STATUS_UNSUPPORTED: 2}

# The header names each column may carry (compared lowercase, markdown emphasis removed).
# The notes column is optional: without it a CPU_FALLBACK row names its op by its API name.
COLUMN_NAMES: dict[str, tuple[str, ...]] = {
    "api": ("api", "api name", "torch api", "pytorch api", "function", "name", "operator", "op"),
    "support": ("support", "supported", "support status", "support level", "status"),
    "notes": (
        "limitations",
        "limitation",
        "notes",
        "note",
        "limitations / notes",
        "limitations/notes",
        "limitations and notes",
        "comments",
        "remarks",
        "details",
    ),
}
REQUIRED_COLUMNS = ("api", "support")

# Support values, by their first word (upper case, emphasis removed).
SUPPORT_VALUES = {
    "Y": STATUS_SUPPORTED,
    "YES": STATUS_SUPPORTED,
    "CPU_FALLBACK": STATUS_CPU_FALLBACK,
    "CPU-FALLBACK": STATUS_CPU_FALLBACK,
    "FALLBACK": STATUS_CPU_FALLBACK,
    "N": STATUS_UNSUPPORTED,
    "NO": STATUS_UNSUPPORTED,
}
# The three kinds of Y the table documents, as they may appear in the support or notes cell.
SUPPORTED_KINDS = ("native", "host-only", "needs a process group")

# API namespaces whose functions are ATen ops of a predictable name: torch.add, torch.Tensor.add
# and torch.nn.functional.gelu are aten::add / aten::gelu; torch.linalg.eigh is aten::linalg_eigh.
# Longest first. Names under other namespaces (modules, torch.distributed, torch.backends) are
# kept in the file as unmapped rows.
ATEN_PREFIXES: tuple[tuple[str, str], ...] = (
    ("torch.nn.functional.", ""),
    ("torch.Tensor.", ""),
    ("torch.linalg.", "linalg_"),
    ("torch.special.", "special_"),
    ("torch.fft.", "fft_"),
    ("torch.", ""),
)
_FUNCTION_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_ATEN_OP = re.compile(r"\baten::[A-Za-z_]\w*(?:\.\w+)?")
_NAMESPACE = re.compile(r"^torch(?:\.\w+)*$")
# torch dtype names a limitations cell may name (torch.float64 or float64), and their aliases.
DTYPE_ALIASES = {
    "double": "float64",
    "float": "float32",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
}
_DTYPE = re.compile(
    r"\b(?:torch\.)?(float64|float32|float16|bfloat16|float8_e4m3fn|float8_e5m2|int64|int32|int16|"
    r"int8|uint8|bool|complex64|complex128|double|half|long|cfloat|cdouble)\b"
)
# No two adjacent parts of these patterns match the same characters ("\W*" alone, never
# "\W*\s*"), so a crafted line cannot make the engine backtrack through every split of it.
_RELEASE_LINE = re.compile(
    r"^\W*(?:neuron\s+)?(?:sdk\s+)?(?:release|version)\W*v?(\d+(?:\.\d+)+)", re.IGNORECASE
)
_RELEASE_IN_TITLE = re.compile(
    r"(?:release|version|neuron(?:\s+sdk)?|torch-neuronx)\W*v?(\d+(?:\.\d+)+)", re.IGNORECASE
)
_FULL_VERSION = re.compile(r"\bv?(\d+\.\d+\.\d+(?:\.\d+)*)\b")


@dataclass(frozen=True)
class ApiRow:
    """One row of the source table, as written there."""

    api: str
    support: str
    notes: str
    section: str  # the heading above the table (the namespace, in TorchNeuron's file)


@dataclass
class OpEntry:
    """What the table says of one ATen op, and the rows that say it."""

    op: str
    status: str
    dtypes: list[str] = field(default_factory=list)  # the dtypes a fallback row names
    kind: str = ""  # for Y: native, host-only or needs a process group, where the row says
    rows: list[ApiRow] = field(default_factory=list)


@dataclass
class NativeTable:
    """One TorchNeuron op table: what it says per op, and where that comes from."""

    release: str
    source: str  # the file name, or "measured on ..."
    source_file: str
    source_sha256: str
    imported_on: str  # ISO date-time, UTC
    method: str
    ops: dict[str, OpEntry]
    unmapped: list[ApiRow] = field(default_factory=list)  # rows that name no ATen op
    file: str = ""  # where it was read from or written to

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for e in self.ops.values() if e.status == s) for s in STATUSES}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": TABLE_KIND,
            "format": TABLE_FORMAT,
            "flavour": FLAVOUR_NATIVE,
            "release": self.release,
            "source": self.source,
            "source_file": self.source_file,
            "source_sha256": self.source_sha256,
            "imported_on": self.imported_on,
            "method": self.method,
            "counts": self.counts(),
            "ops": [asdict(entry) for entry in sorted(self.ops.values(), key=lambda e: e.op)],
            "unmapped": [asdict(row) for row in self.unmapped],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], file: str = "") -> NativeTable:
        if data.get("kind") != TABLE_KIND or data.get("flavour") != FLAVOUR_NATIVE:
            raise ValueError("not a workbench TorchNeuron op table")
        ops = {}
        for item in data["ops"]:
            rows = [ApiRow(**row) for row in item.get("rows", [])]
            ops[item["op"]] = OpEntry(
                item["op"], item["status"], list(item.get("dtypes", [])), item.get("kind", ""), rows
            )
        return cls(
            release=str(data["release"]),
            source=data["source"],
            source_file=data["source_file"],
            source_sha256=data["source_sha256"],
            imported_on=data["imported_on"],
            method=data["method"],
            ops=ops,
            unmapped=[ApiRow(**row) for row in data.get("unmapped", [])],
            file=file,
        )


# --------------------------------------------------------------------------------------------
# Where tables live


def op_tables_dir() -> Path:
    """$WORKBENCH_OP_TABLES, else ~/.cache/workbench/op-tables (under $XDG_CACHE_HOME where set)."""
    override = os.environ.get(ENV_OP_TABLES)
    if override:
        return Path(override).expanduser()
    return user_cache_dir() / "op-tables"


def release_key(release: str) -> tuple[int, ...]:
    """2.29.0 -> (2, 29, 0): releases compare by their numbers, not as text."""
    return tuple(int(part) for part in re.findall(r"\d+", release))


def load_native_tables(folder: Path | None = None) -> list[NativeTable]:
    """Every readable table in the folder, newest first (by release, then import date). A file
    that is not such a table (hand-edited, another program's) is passed over."""
    folder = op_tables_dir() if folder is None else folder
    tables = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            tables.append(NativeTable.from_json(data, str(path)))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            continue
    tables.sort(key=lambda t: (release_key(t.release), t.imported_on), reverse=True)
    return tables


def newest_native_table(folder: Path | None = None) -> NativeTable | None:
    tables = load_native_tables(folder)
    return tables[0] if tables else None


def _file_name(table: NativeTable) -> str:
    release = re.sub(r"[^\w.-]", "_", table.release)
    return f"torchneuron_ops_{release}_{table.source_sha256[:12]}.json"


def write_table(table: NativeTable, out: Path | None = None) -> Path:
    """Write the table into `out` (default op_tables_dir()) atomically; returns its path."""
    folder = op_tables_dir() if out is None else Path(out)
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"--out {folder} is a file, not a folder.")
    path = folder / _file_name(table)
    try:
        write_json_atomic(path, table.to_json())
    except OSError as exc:
        raise BadInput(f"The table cannot be written to {folder}: {exc.strerror or exc}.") from None
    table.file = str(path)
    return path


def summary_line(table: NativeTable) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in table.counts().items())
    line = f"wrote {table.file}: release {table.release}, {counts}"
    if table.unmapped:
        line += f" ({len(table.unmapped)} API row(s) name no ATen op and were kept apart)"
    return line


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def add_entry(ops: dict[str, OpEntry], entry: OpEntry) -> None:
    """Merge `entry` into `ops`: the strictest status holds; dtypes and rows accumulate."""
    known = ops.get(entry.op)
    if known is None:
        ops[entry.op] = entry
        return
    if _STRICTNESS[entry.status] > _STRICTNESS[known.status]:
        known.status, known.kind = entry.status, entry.kind
    known.dtypes = sorted(set(known.dtypes) | set(entry.dtypes))
    known.rows.extend(entry.rows)


# --------------------------------------------------------------------------------------------
# Parsing TorchNeuron's markdown table


def _plain(cell: str) -> str:
    """A cell without markdown emphasis, code ticks or link targets: `**Y**` -> Y."""
    cell = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", cell)
    cell = re.sub(r"<[^>]+>", " ", cell)
    return " ".join(cell.replace("`", "").replace("*", "").replace("\\|", "|").split())


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [_plain(c) for c in re.split(r"(?<!\\)\|", body)]


def _is_separator(line: str) -> bool:
    return bool(re.fullmatch(r"\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*", line))


def _column_roles(header: list[str]) -> dict[str, int]:
    roles: dict[str, int] = {}
    for index, name in enumerate(header):
        for role, names in COLUMN_NAMES.items():
            if name.lower() in names and role not in roles:
                roles[role] = index
                break
    return roles


def _expected_columns() -> str:
    def one(role: str) -> str:
        return " or ".join(repr(n) for n in COLUMN_NAMES[role][:3])

    return (
        f"an API column ({one('api')}), a support column ({one('support')}) and optionally a "
        f"limitations column ({one('notes')}), in any case"
    )


def _release_of(lines: list[str]) -> str | None:
    """The release named in the title, or on a 'Release: X' / 'Version: X' line."""
    for line in lines:
        if line.lstrip().startswith("|"):
            break  # the tables have started: a version there is a row, not the release
        stripped = line.strip()
        if stripped.startswith("# "):
            found = _RELEASE_IN_TITLE.search(stripped) or _FULL_VERSION.search(stripped)
            if found:
                return found.group(1)
        found = _RELEASE_LINE.match(stripped)
        if found:
            return found.group(1)
    return None


def aten_name(api: str, section: str = "") -> str | None:
    """The ATen op an API name stands for (torch.Tensor.add_ -> aten::add_), or None."""
    name = re.sub(r"\(.*$", "", api).strip()
    if not name.startswith("torch.") and _NAMESPACE.match(section):
        prefix = section + "."
        if name.startswith(section.rsplit(".", 1)[-1] + "."):  # "Tensor.add" under torch.Tensor
            prefix = section.rsplit(".", 1)[0] + "." if "." in section else ""
        name = prefix + name
    for prefix, aten_prefix in ATEN_PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            return f"aten::{aten_prefix}{rest}" if _FUNCTION_NAME.match(rest) else None
    return None


def _dtypes(notes: str) -> list[str]:
    names = {DTYPE_ALIASES.get(m, m) for m in _DTYPE.findall(notes)}
    return sorted(names)


def _op_names(notes: str) -> list[str]:
    """The ATen ops a limitations cell names, without a `.default` overload suffix."""
    return list(dict.fromkeys(m.removesuffix(".default") for m in _ATEN_OP.findall(notes)))


def _supported_kind(*cells: str) -> str:
    text = " ".join(cells).lower()
    return next((kind for kind in SUPPORTED_KINDS if kind in text), "")


def _entries(row: ApiRow, status: str) -> list[OpEntry]:
    if status == STATUS_CPU_FALLBACK:
        named = _op_names(row.notes)
        dtypes = _dtypes(row.notes)
        if named:
            return [OpEntry(op, status, dtypes, "", [row]) for op in named]
    op = aten_name(row.api, row.section)
    if op is None:
        return []
    kind = _supported_kind(row.support, row.notes) if status == STATUS_SUPPORTED else ""
    dtypes = _dtypes(row.notes) if status == STATUS_CPU_FALLBACK else []
    return [OpEntry(op, status, dtypes, kind, [row])]


@dataclass
class _Parsed:
    rows: list[tuple[ApiRow, str]]  # each API row with its status
    headers_seen: list[list[str]]
    unknown_values: set[str]


def _parse_tables(lines: list[str]) -> _Parsed:
    parsed = _Parsed([], [], set())
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        heading = re.match(r"^\s*#{1,6}\s+(.*)$", line)
        if heading:
            section = _plain(heading.group(1)).rstrip(":")
        is_table = line.lstrip().startswith("|") and index + 1 < len(lines)
        if not (is_table and _is_separator(lines[index + 1])):
            index += 1
            continue
        header = _cells(line)
        parsed.headers_seen.append(header)
        roles = _column_roles(header)
        index += 2
        while index < len(lines) and lines[index].lstrip().startswith("|"):
            if all(role in roles for role in REQUIRED_COLUMNS):
                cells = _cells(lines[index])
                cell = dict.fromkeys(COLUMN_NAMES, "")
                cell.update({r: cells[i] for r, i in roles.items() if i < len(cells)})
                value = cell["support"]
                first = re.split(r"[\s(,;:]", value.upper(), maxsplit=1)[0] if value else ""
                status = SUPPORT_VALUES.get(first)
                if cell["api"] and status:
                    parsed.rows.append((ApiRow(cell["api"], value, cell["notes"], section), status))
                elif cell["api"] and value:
                    parsed.unknown_values.add(value)
            index += 1
    return parsed


def parse_compatibility_markdown(
    text: str, *, source_file: str, source_sha256: str, release: str | None = None
) -> NativeTable:
    """TorchNeuron's API compatibility table as a NativeTable; BadInput, in one sentence, for a
    file with no table whose columns are recognised, no API row, or no release to file it under."""
    lines = text.splitlines()
    parsed = _parse_tables(lines)
    if not parsed.headers_seen:
        raise BadInput(
            f"{source_file} holds no markdown table; expected TorchNeuron's "
            f"torch_api_compatibility.md with {_expected_columns()}."
        )
    if not any(all(r in _column_roles(h) for r in REQUIRED_COLUMNS) for h in parsed.headers_seen):
        found = list(dict.fromkeys(name for header in parsed.headers_seen for name in header))
        raise BadInput(
            f"{source_file} has tables with the columns {', '.join(repr(n) for n in found[:12])}, "
            f"not the ones TorchNeuron's compatibility table has: {_expected_columns()}."
        )
    if not parsed.rows:
        values = ", ".join(sorted(parsed.unknown_values)[:5]) or "none"
        raise BadInput(
            f"{source_file} has no API row with a support value of "
            f"{', '.join(SUPPORT_VALUES)} (values found: {values})."
        )
    release = release or _release_of(lines)
    if not release:
        raise BadInput(
            f"{source_file} names no release in its title or on a 'Release:' line; give it with "
            "--release (e.g. --release 2.29.0)."
        )
    ops: dict[str, OpEntry] = {}
    unmapped: list[ApiRow] = []
    for row, status in parsed.rows:
        entries = _entries(row, status)
        if not entries:
            unmapped.append(row)
        for entry in entries:
            add_entry(ops, entry)
    return NativeTable(
        release=release,
        source=source_file,
        source_file=source_file,
        source_sha256=source_sha256,
        imported_on=now_utc(),
        method=(
            "TorchNeuron's PyTorch API compatibility table, parsed: API names map to ATen ops "
            "by name (torch.add, torch.Tensor.add -> aten::add; torch.linalg.X -> "
            "aten::linalg_X), a CPU_FALLBACK row to the ATen op its limitations name; an op "
            "named by several rows takes the strictest value"
        ),
        ops=ops,
        unmapped=unmapped,
    )


def import_native(
    path: Path, *, release: str | None = None, out: Path | None = None
) -> NativeTable:
    """Parse a downloaded torch_api_compatibility.md and write its versioned table file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"{path} cannot be read: {exc.strerror or exc}.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text; give the markdown file itself.") from None
    if release is not None and not release.strip():
        raise BadInput("--release is empty; give the Neuron release, e.g. 2.29.0.")
    table = parse_compatibility_markdown(
        text, source_file=Path(path).name, source_sha256=sha256_of(data), release=release
    )
    write_table(table, out)
    return table
