"""The waste explorer: sliders over a padding setting, live padding arithmetic, one button to measure it.

Everything shown live is arithmetic on the dataset's token lengths (:mod:`nbhelpers.data.waste`), no model;
the "measure this setting" button runs the real step through the runner and shows its real tok/s.
The padding fraction sits in an HTML element with the CSS class ``nbh-padding-fraction`` (the
measured result in ``nbh-measured``) so a browser test can read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from nbhelpers.data.strategies import STRATEGIES, PaddingSettings
from nbhelpers.data.waste import WasteSummary, summarize_waste, waste_table
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.validation import ConfigError

PADDING_CLASS = "nbh-padding-fraction"
SUMMARY_CLASS = "nbh-waste-summary"
MEASURED_CLASS = "nbh-measured"
SNAPSHOT_CLASS = "nbh-explorer-start"
LABELS = {
    "batch_size": "batch size",
    "max_length": "max length",
    "pad_to_multiple_of": "pad to multiple of",
    "num_buckets": "buckets",
    "token_budget": "token budget",
}


def padding_text(summary: WasteSummary) -> str:
    """The padding-fraction element's HTML: ``padding fraction: 37.5%``."""
    return f"<span>padding fraction: <b>{summary.padding_fraction:.1%}</b></span>"


def summary_text(summary: WasteSummary) -> str:
    """Positions per step, real tokens per step, steps per epoch, largest step and truncation."""
    return (
        f"<span>positions/step: <b>{summary.positions_per_step:,.0f}</b> &nbsp;|&nbsp; "
        f"real tokens/step: <b>{summary.real_tokens_per_step:,.0f}</b> &nbsp;|&nbsp; "
        f"steps/epoch: <b>{summary.steps_per_epoch:,}</b> &nbsp;|&nbsp; "
        f"largest step: <b>{summary.max_positions_per_step:,}</b> positions &nbsp;|&nbsp; "
        f"truncated by max length: <b>{summary.truncated_fraction:.1%}</b> of tokens</span>"
    )


def starting_point_html(lengths: Sequence[int], settings: PaddingSettings) -> str:
    """What the explorer shows at its starting settings, as plain HTML: a saved or exported copy of the notebook
    keeps it (the controls themselves need a live kernel, and their saved view a widget library from the web)."""
    summary = summarize_waste(waste_table(lengths, settings), lengths, settings.strategy, settings.max_length)
    where = f"{settings.strategy}, batch size {settings.batch_size}, max length {settings.max_length}"
    return (
        f"<div class='{SNAPSHOT_CLASS}'><p>The explorer at its starting settings ({where}); move its controls below "
        f"in a live notebook:</p><p>{padding_text(summary)}</p><p>{summary_text(summary)}</p></div>"
    )


def measured_text(record: RunRecord) -> str:
    """The measured record in one line: real tok/s and its padding fraction, or why it failed."""
    if not record.ok:
        return f"<span>measured <b>{record.label}</b>: failed: {record.reason}</span>"
    m = record.metrics
    return (
        f"<span>measured <b>{record.label}</b>: <b>{m['real_tokens_per_s']:,.0f} real tok/s</b> "
        f"(padding {m['padding_fraction']:.1%}, {m['positions_per_step']:,.0f} positions/step, "
        f"median step {m['step_time_median_s']:.3f} s)</span>"
    )


def iter_widgets(root: Any) -> Iterator[Any]:
    """The widget and every widget inside it, depth first."""
    yield root
    for child in getattr(root, "children", ()):
        yield from iter_widgets(child)


def find_widget(root: Any, description: str | None = None, css_class: str | None = None) -> Any:
    """The first widget inside ``root`` with this description or CSS class (KeyError when none)."""
    for widget in iter_widgets(root):
        if description is not None and getattr(widget, "description", None) == description:
            return widget
        if css_class is not None and css_class in getattr(widget, "_dom_classes", ()):
            return widget
    raise KeyError(f"no widget with description={description!r} css_class={css_class!r}")


def _slider(widgets: Any, name: str, value: int, low: int, high: int, step: int = 1) -> Any:
    return widgets.IntSlider(
        value=min(max(value, low), high), min=low, max=high, step=step, description=LABELS[name],
        continuous_update=False, style={"description_width": "initial"}, layout=widgets.Layout(width="420px"),
    )  # fmt: skip


def waste_explorer(
    lengths: Sequence[int],
    settings: PaddingSettings | None = None,
    base_config: RunConfig | None = None,
    run: Callable[[RunConfig], RunRecord] | None = None,
    store: RunStore | None = None,
    plot: bool = True,
    snapshot: bool = True,
) -> Any:
    """The explorer as one ipywidgets container (display it, or make it a cell's last expression); with
    ``snapshot``, :func:`starting_point_html` is displayed first, for copies of the notebook read without a kernel.

    ``settings`` is where the controls start (default: dynamic padding, batch 4, max length 512);
    ``base_config`` is the measured configuration the button starts from (its model, data and steps);
    ``run`` measures a config (default :func:`nbhelpers.measure.runner.run_config`); a measured record is
    appended to ``store`` when one is given. ``plot=False`` leaves the HoloViews picture out.
    """
    import ipywidgets as widgets
    from IPython.display import display

    if not lengths:
        raise ValueError("lengths is empty: the explorer needs the dataset's token lengths")
    start = settings or PaddingSettings("dynamic", batch_size=4, max_length=512)
    if snapshot:
        from IPython.display import HTML

        display(HTML(starting_point_html(lengths, start)))
    longest = max(int(n) for n in lengths)
    length_cap = max(64, -(-max(longest, start.max_length) // 64) * 64)
    selector = widgets.ToggleButtons(
        options=[(s.label, name) for name, s in STRATEGIES.items()], value=start.strategy, description="strategy",
        tooltips=[s.description for s in STRATEGIES.values()],
    )
    sliders = {
        "batch_size": _slider(widgets, "batch_size", start.batch_size, 1, max(64, start.batch_size)),
        "max_length": _slider(widgets, "max_length", start.max_length, 8, length_cap, 8),
        "pad_to_multiple_of": _slider(widgets, "pad_to_multiple_of", start.pad_to_multiple_of, 1, 256),
        "num_buckets": _slider(widgets, "num_buckets", start.num_buckets, 1, 64),
        "token_budget": _slider(widgets, "token_budget", start.token_budget, 0, 64 * length_cap, 64),
    }
    sliders["token_budget"].tooltip = "tokens per step for token_budget; 0 = batch size x max length"
    padding_html = widgets.HTML()
    padding_html.add_class(PADDING_CLASS)
    summary_html = widgets.HTML()
    summary_html.add_class(SUMMARY_CLASS)
    picture = widgets.Output()
    button = widgets.Button(
        description="measure this setting", button_style="primary", icon="play", layout=widgets.Layout(width="auto")
    )
    measured_html = widgets.HTML(value="<span>not measured yet</span>")
    measured_html.add_class(MEASURED_CLASS)

    def chosen() -> PaddingSettings:
        return start.replace(strategy=selector.value, **{name: s.value for name, s in sliders.items()})

    def refresh(_: Any = None) -> None:
        s = chosen()
        table = waste_table(lengths, s)
        summary = summarize_waste(table, lengths, s.strategy, s.max_length)
        padding_html.value = padding_text(summary)
        summary_html.value = summary_text(summary)
        if plot:
            from .padding_plots import explorer_plot

            with picture:
                picture.clear_output(wait=True)
                display(explorer_plot(lengths, table, s.max_length, title=f"{s.strategy}: real vs padding"))

    def measure(_: Any = None) -> None:
        s = chosen()
        base = base_config or RunConfig()
        try:
            config = base.replace(
                **(s.to_config() | {"seed": base.seed}), profile=False,
                label=f"explorer: {s.strategy} b{s.batch_size}x{s.max_length}",
            )  # fmt: skip
        except ConfigError as error:
            measured_html.value = f"<span>cannot measure: {error}</span>"
            return
        button.disabled = True
        measured_html.value = f"<span>measuring {config.name} …</span>"
        try:
            if run is None:
                from nbhelpers.measure.runner import run_config

                record = run_config(config, notebook="03_dynamic_padding.ipynb (explorer)")
            else:
                record = run(config)
            if store is not None:
                store.append(record)
            measured_html.value = measured_text(record)
        finally:
            button.disabled = False

    selector.observe(refresh, names="value")
    for slider in sliders.values():
        slider.observe(refresh, names="value")
    button.on_click(measure)
    refresh()
    controls = widgets.VBox([selector, *sliders.values()])
    readout = widgets.VBox([padding_html, summary_html, widgets.HBox([button, measured_html])])
    return widgets.VBox([controls, readout, picture])
