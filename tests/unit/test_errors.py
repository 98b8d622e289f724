"""The one helper that puts an exception on one line, pointing at the user's own code."""

import inspect
import os
import traceback

import pytest
import torch
from torch import nn

import workbench
from workbench.errors import (
    ERROR_MESSAGE_CHARS,
    BadInput,
    describe_error,
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
