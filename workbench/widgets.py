"""An ipywidgets control panel for stepping through a notebook in JupyterLab.

The panel writes straight back into the notebook's globals, the same names the parameters cell
defines, so every later cell reads plain variables whether they came from papermill or a widget.
Panel cells are tagged `skip-execution` (papermill never runs them) and `interactive-only` (the
HTML report drops them): headless runs depend on the parameters cell alone.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from workbench import context
from workbench.errors import BadInput
from workbench.markup import stylesheet
from workbench.params import Parameter, coerce, notebook_parameters
from workbench.targets import TARGET_NAMES
from workbench.workloads import BUILTIN_WORKLOADS


def _control(param: Parameter, value: Any, label_chars: int) -> w.Widget:
    label = {
        "description": param.name,
        "tooltip": param.help,
        # Wide enough for the longest name, so no label is cut to "warmup_thresh...".
        "style": {"description_width": f"{label_chars + 2}ch"},
        "layout": {"width": f"{label_chars + 40}ch"},
    }
    if param.name == "target":
        return w.Dropdown(options=list(TARGET_NAMES), value=value, **label)
    if param.name == "workload":
        return w.Combobox(
            options=list(BUILTIN_WORKLOADS), value=value, ensure_option=False, **label
        )
    if param.type_name == "bool":
        return w.Checkbox(value=value, indent=False, **label)
    if param.type_name == "int":
        return w.IntText(value=value, **label)
    if param.type_name == "float":
        return w.FloatText(value=value, **label)
    text = ", ".join(map(str, value)) if param.type_name.startswith("list") else value
    return w.Text(value=text, **label)


def control_panel(notebook: str, namespace: dict[str, Any]) -> w.VBox:
    """One control per parameter of `notebook`; each change is coerced and stored in `namespace`.

    Every parameter the panel shows is defined in `namespace` as soon as the panel exists (its
    current value, else the notebook's default), so the cells below run whether or not the
    parameters cell ran first. A value the parameter's type rejects is shown under the panel and
    not stored.
    """
    message = w.HTML()
    controls = []
    params = notebook_parameters(context.NOTEBOOKS_DIR / f"{notebook}.ipynb")
    label_chars = max((len(name) for name in params), default=0)
    for param in params.values():
        namespace[param.name] = coerce(param, namespace.get(param.name, param.default))
        control = _control(param, namespace[param.name], label_chars)

        def store(change: dict[str, Any], param: Parameter = param) -> None:
            try:
                namespace[param.name] = coerce(param, change["new"])
                message.value = ""
            except BadInput as exc:  # shown under the panel; old value stays
                message.value = f'<span class="wb-error">{html.escape(str(exc))}</span>'

        control.observe(store, names="value")
        controls.append(control)
    hint = w.HTML(
        f"<style>{stylesheet()}</style>Change values here, then run the cells below "
        "(Run &gt; Run Selected Cell and All Below)."
    )
    return w.VBox([hint, *controls, message])
