"""The one helper that puts an exception on one line, pointing at the user's own code."""

import inspect
import os
import traceback

import pytest
import torch
from torch import nn

import workbench
from tests.fixtures import REPO_ROOT
from workbench.errors import (
    ERROR_MESSAGE_CHARS,
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_OK,
    BadInput,
    describe_error,
    exit_codes_line,
    is_user_code,
    one_line,
    pick_user_frame,
)
from workbench.params import parse_assignments

TORCH_DIR = os.path.dirname(torch.__file__)
WORKBENCH_DIR = os.path.dirname(workbench.__file__)


class WrongWidth(nn.Module):
    """A user model whose own forward feeds torch's Linear a tensor of the wrong width."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _throw(exc: BaseException) -> None:
    raise exc


def _raised(fn) -> BaseException:
    with pytest.raises(Exception) as caught:
        fn()
    return caught.value


def test_names_the_innermost_user_frame_not_torchs():
    exc = _raised(lambda: WrongWidth()(torch.randn(2, 5)))
    innermost = traceback.extract_tb(exc.__traceback__)[-1]
    assert innermost.filename.startswith(TORCH_DIR), "the error is raised inside torch"

    error = describe_error(exc)
    lines, first = inspect.getsourcelines(WrongWidth.forward)
    forward_line = first + next(i for i, text in enumerate(lines) if "self.inner(x)" in text)
    assert error.frame is not None and error.frame.in_user_code
    assert error.frame.function == "forward"
    assert error.frame.line == forward_line
    assert error.location.endswith(f"test_errors.py:{forward_line} in forward")
    assert str(error) == f"{error.text} (at {error.location})"
    assert error.text.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")


def test_workbench_machinery_frames_are_skipped():
    exc = _raised(lambda: parse_assignments(["no-equals-sign"]))
    assert isinstance(exc, BadInput)
    innermost = traceback.extract_tb(exc.__traceback__)[-1]
    assert innermost.filename.startswith(WORKBENCH_DIR)
    error = describe_error(exc)
    assert error.frame is not None and error.frame.in_user_code
    assert "test_errors.py" in error.location and "<lambda>" in error.location


def test_without_a_user_frame_the_innermost_frame_is_named_and_marked():
    torch_frame = traceback.FrameSummary(
        os.path.join(TORCH_DIR, "nn", "modules", "module.py"), 1700, "_call_impl", line=""
    )
    machinery = traceback.FrameSummary(
        os.path.join(WORKBENCH_DIR, "baseline", "measure.py"), 90, "step", line=""
    )
    frame = pick_user_frame([machinery, torch_frame])
    assert frame is not None and not frame.in_user_code
    assert (frame.path, frame.line, frame.function) == (torch_frame.filename, 1700, "_call_impl")
    assert pick_user_frame([]) is None


@pytest.mark.parametrize(
    ("path", "user"),
    [
        (os.path.join(TORCH_DIR, "nn", "functional.py"), False),
        (TORCH_DIR + "_xla" + os.sep + "core" + os.sep + "xla_model.py", False),
        (os.path.join(WORKBENCH_DIR, "runner.py"), False),
        (os.path.join(WORKBENCH_DIR, "workloads", "seed_mlp.py"), True),
        (os.path.join(WORKBENCH_DIR, "workload.py"), True),
        (inspect.getfile(traceback), False),
        ("<frozen importlib._bootstrap>", False),
        ("<ipython-input-3-1a2b3c>", True),
        (__file__, True),
    ],
)
def test_user_code_is_what_the_user_or_a_builtin_workload_wrote(path, user):
    assert is_user_code(path) is user


def test_long_messages_are_cut_and_every_line_break_goes():
    exc = _raised(lambda: _throw(ValueError("start\n\n   next " + "x" * 5000)))
    error = describe_error(exc)
    assert "\n" not in str(error)
    assert error.message.startswith("start next x")
    assert len(error.message) == ERROR_MESSAGE_CHARS and error.message.endswith("…")
    assert one_line("short\tmessage\n") == "short message"
    assert one_line("y" * ERROR_MESSAGE_CHARS) == "y" * ERROR_MESSAGE_CHARS


def test_an_exception_never_raised_has_no_location_and_an_empty_message_keeps_its_type():
    error = describe_error(KeyError())
    assert error.frame is None and error.location == ""
    assert str(error) == "KeyError"
    assert str(describe_error(ValueError("bad value"))) == "ValueError: bad value"


def _readme_exit_codes() -> dict[int, str]:
    """README's exit-code table (the first table after a heading that names exit codes): each
    code and its meaning, markdown backticks and line layout taken out."""
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    heading = next(
        i for i, line in enumerate(lines) if line.startswith("#") and "exit code" in line.lower()
    )
    rows = []
    for line in lines[heading + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows or line.startswith("#"):
            break
    header = [cell.lower() for cell in rows[0]]
    code_at, meaning_at = header.index("code"), header.index("meaning")
    return {
        int(row[code_at]): " ".join(row[meaning_at].replace("`", "").split())
        for row in rows[2:]  # after the header and its |---| line
    }


def test_the_readme_lists_exactly_the_exit_codes_of_the_table_with_their_meanings():
    readme = _readme_exit_codes()
    assert sorted(readme) == sorted(entry.code for entry in EXIT_CODES)
    for entry in EXIT_CODES:
        # README may say more after it; it starts with the table's meaning, under the commands
        # that exit with it.
        commands = " or ".join(f"workbench {command}" for command in entry.commands)
        said = f"{commands}: {entry.meaning}" if commands else entry.meaning
        assert readme[entry.code].lower().startswith(said.lower()), (entry.code, readme[entry.code])


def test_the_help_lists_every_exit_code_from_the_table():
    line = exit_codes_line()
    assert line.startswith("exit codes: ")
    assert [int(part.split()[0]) for part in line.removeprefix("exit codes: ").split(", ")] == [
        entry.code for entry in EXIT_CODES
    ]
    assert exit_codes_line([EXIT_OK, EXIT_BAD_INPUT], {EXIT_OK: "fine"}) == (
        "exit codes: 0 fine, 2 bad input"
    )
