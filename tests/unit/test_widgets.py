"""The control panel writes coerced values into the notebook's namespace (no kernel needed:
ipywidgets run without a frontend, and observers fire on assignment)."""

import ipywidgets as w

from workbench.widgets import control_panel


def _controls(panel):
    return {c.description: c for c in panel.children if c.description}


def test_panel_has_one_control_per_parameter_and_writes_back():
    namespace = {"target": "auto", "fail_on_drift": False}
    panel = control_panel("00_environment", namespace)
    controls = _controls(panel)
    assert set(controls) == {"target", "out_dir", "pinned_manifest", "fail_on_drift"}
    assert isinstance(controls["target"], w.Dropdown) and "neuron" in controls["target"].options
    assert isinstance(controls["fail_on_drift"], w.Checkbox)
    controls["target"].value = "cpu"
    controls["fail_on_drift"].value = True
    controls["pinned_manifest"].value = "pins/env.json"
    assert namespace == {
        "target": "cpu",
        "fail_on_drift": True,
        "pinned_manifest": "pins/env.json",
        "out_dir": ".",
    }


def test_panel_defines_every_parameter_it_shows_before_any_change():
    """The README's flow: run the panel without the parameters cell, then the cells below."""
    namespace: dict = {"steady_steps": 7}
    panel = control_panel("01_baseline", namespace)
    assert set(namespace) == set(_controls(panel))
    assert namespace["steady_steps"] == 7, "a value already set is kept"
    assert namespace["warmup_threshold"] == 0.1 and namespace["kinds"] == ["train", "infer"]
    assert _controls(panel)["steady_steps"].value == 7


def test_panel_labels_fit_the_longest_name_and_carry_the_stylesheet():
    panel = control_panel("04_retuning", {})
    controls = _controls(panel)
    longest = max(map(len, controls))
    assert all(c.style.description_width == f"{longest + 2}ch" for c in controls.values())
    hint = panel.children[0].value
    assert "<style>" in hint and ".wb-banner" in hint and ".wb-error" in hint
    assert "Run Selected Cell and All Below" in hint


def test_list_parameters_read_as_numbers_and_bad_text_is_reported(tmp_path, monkeypatch):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from workbench import context

    nb = new_notebook()
    cell = new_code_cell(
        'batch_sizes: list = [8, 16]  # sizes to try\ntarget: str = "auto"  # where'
    )
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "py"}
    nbformat.write(nb, tmp_path / "09_sweep.ipynb")
    monkeypatch.setattr(context, "NOTEBOOKS_DIR", tmp_path)

    namespace = {"batch_sizes": [8, 16]}
    panel = control_panel("09_sweep", namespace)
    sizes = _controls(panel)["batch_sizes"]
    assert sizes.value == "8, 16"
    sizes.value = "4, 32, 64"
    assert namespace["batch_sizes"] == [4, 32, 64]
    sizes.value = "4, [<b>"
    assert namespace["batch_sizes"] == [4, 32, 64], "a bad value never replaces a good one"
    message = panel.children[-1].value
    assert message and "<b>" not in message
