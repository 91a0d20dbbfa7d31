"""What vit/ui/gradio_patches.py changes about Gradio's per-event work (patches 8, 13, 14): each
test fails with Gradio 6.31 as it is."""
import asyncio

import gradio as gr
import pytest
from gradio.state_holder import SessionState

from vit.ui.gradio_patches import SKIP, no_summaries, skips_cost_nothing, small_sessions


def three_boxes():
    with gr.Blocks() as blocks:
        a, b, c = gr.Textbox("a"), gr.Textbox("b"), gr.Textbox("c")
        b.change(lambda x: x, b, [a, b, c])
    return blocks, (a, b, c), blocks.fns[0]


def test_an_output_left_as_it_is_is_not_rebuilt():
    """A dict return naming one output of three: the other two went through Gradio's update path
    (a new component built from its arguments, every event); now they are sent as skips."""
    small_sessions()
    skips_cost_nothing()
    blocks, (a, b, c), fn = three_boxes()
    state = SessionState(blocks)
    sent = asyncio.run(blocks.postprocess_data(fn, {b: "new"}, state))
    assert sent == [SKIP, "new", SKIP]
    assert state.blocks_config.blocks[a._id] is a and state.blocks_config.blocks[c._id] is c
    # A real update still goes through Gradio's own path and changes the session's copy.
    sent = asyncio.run(blocks.postprocess_data(fn, {a: gr.update(visible=False), c: "z"}, state))
    assert sent[0]["visible"] is False and sent[1] == SKIP and sent[2] == "z"
    assert state.blocks_config.blocks[a._id] is not a and state.blocks_config.blocks[a._id].visible is False
    # Nothing named at all, and gr.skip() in a tuple, both leave every output as it is.
    assert asyncio.run(blocks.postprocess_data(fn, gr.skip(), state)) == [SKIP] * 3
    assert asyncio.run(blocks.postprocess_data(fn, ("x", gr.skip(), "y"), state)) == ["x", SKIP, "y"]


def test_the_queue_keeps_no_summary_nobody_reads(monkeypatch):
    """After every event the queue built a pandas table of up to 10,000 events' timings, read
    only by the monitoring dashboard."""
    from gradio.queueing import Queue
    no_summaries(monitoring=False)
    queue = Queue.__new__(Queue)
    queue.cached_event_analytics_summary = {"functions": {}}
    queue.events_recorded = queue.event_count_at_last_cache = 5
    queue.events_recorded_per_fn, queue.ANAYLTICS_CACHE_FREQUENCY = {}, 1
    queue.events_recorded += 1
    records = [{"function": "f", "status": "success", "process_time": 0.1}] * 3
    assert queue.compute_analytics_summary(records) == {"functions": {}}
    no_summaries(monitoring=True)                      # VIT_MONITORING=1: the dashboard reads them
    try:
        assert queue.compute_analytics_summary(records)["functions"]["f"]["total_requests"] == 3
    finally:
        no_summaries(monitoring=False)


def test_the_app_refuses_to_patch_a_gradio_it_was_not_written_for(monkeypatch):
    """The patches replace private parts of one Gradio release: on another the app stops at
    start-up with one line naming both versions and the fix, before patching anything."""
    import pytest

    from vit.ui import create_app, gradio_patches
    from vit.ui.models import StartupError
    assert gr.__version__ == gradio_patches.WRITTEN_FOR       # the installed one runs
    monkeypatch.setattr(gr, "__version__", "6.32.0")
    with pytest.raises(StartupError) as e:
        create_app()
    message = str(e.value)
    assert "\n" not in message and "6.31.0" in message and "6.32.0" in message
    assert "pip install -r requirements.txt" in message


@pytest.mark.process
def test_the_speedups_can_be_switched_off_and_the_fixes_cannot():
    """VIT_GRADIO_SPEEDUPS=0 leaves Gradio's own per-event work (patches 13 and 14) as it is, to
    tell whether a fault is theirs; the patches that close holes are applied either way. (A fresh
    process: patches are process-wide. Off first, then on, in the same one.)"""
    import subprocess
    import sys
    code = ("import gradio.queueing as q, gradio.blocks as b, gradio.state_holder as s;"
            "from vit.ui import gradio_patches as p;"
            "ours = lambda: [f.__module__ == p.__name__ for f in (q.Queue.compute_analytics_summary,"
            " b.Blocks.postprocess_data, s.SessionState.__setitem__)];"
            "p.apply(False); off = ours(); p.apply(True); print(off, ours())")
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120).stdout.strip()
    # (summaries, skips, small sessions): off leaves the first two Gradio's; on, all three ours
    assert said == "[False, False, True] [True, True, True]", said
