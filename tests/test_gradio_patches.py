"""What vit/ui/gradio_patches.py changes about Gradio's per-event work (patches 8, 13, 14, 15): each
test fails with Gradio 6.31 as it is."""
import asyncio

import gradio as gr
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
    no_summaries()
    queue = Queue.__new__(Queue)
    queue.cached_event_analytics_summary = {"functions": {}}
    queue.events_recorded = queue.event_count_at_last_cache = 5
    queue.events_recorded_per_fn, queue.ANAYLTICS_CACHE_FREQUENCY = {}, 1
    queue.events_recorded += 1
    records = [{"function": "f", "status": "success", "process_time": 0.1}] * 3
    monkeypatch.delenv("VIT_MONITORING", raising=False)
    assert queue.compute_analytics_summary(records) == {"functions": {}}
    monkeypatch.setenv("VIT_MONITORING", "1")
    assert queue.compute_analytics_summary(records)["functions"]["f"]["total_requests"] == 3


def test_an_answer_overtaken_by_a_newer_records_answer_changes_nothing_it_set():
    """One visitor, two events: the first reads the record and is slow to finish (a tab's six
    pictures to encode), the second lands a newer record (a Clear) and is answered first. The
    first's headline would then have covered the cleared page; now it is a skip, while what it
    alone sets still arrives. In the order the records landed, both arrive whole."""
    import threading

    from vit.ui.gradio_patches import answers_in_order
    from vit.ui.record import Visit
    answers_in_order()
    read, go = threading.Event(), threading.Event()

    def tab(visit):                        # reads the record, then takes its time
        r = visit.record
        read.set()
        go.wait(10)
        return f"{r.tab}'s answer", "tab pictures"

    def clear(visit):                      # lands a newer record
        base = visit.record
        visit.commit(base, base.showing(None, "drawing"))
        return "Draw a digit"

    with gr.Blocks() as blocks:
        visit = gr.State(Visit("mnist"))
        status, pictures = gr.Textbox(), gr.Textbox()
        pictures.change(tab, visit, [status, pictures])
        status.change(clear, visit, status)
    slow, fast = blocks.fns[0], blocks.fns[1]
    state = SessionState(blocks)

    async def out_of_order():
        first = asyncio.create_task(blocks.process_api(block_fn=slow, inputs=[None], state=state))
        await asyncio.to_thread(read.wait, 10)
        second = await blocks.process_api(block_fn=fast, inputs=[None], state=state)
        go.set()
        return (await first)["data"], second["data"]

    first, second = asyncio.run(out_of_order())
    assert second == ["Draw a digit"]
    assert first == [SKIP, "tab pictures"]          # its headline would cover the cleared page
    # In order (the record read, the answer sent, then a newer one), nothing is dropped.
    assert asyncio.run(blocks.process_api(block_fn=slow, inputs=[None], state=state))["data"] == \
        ["draw's answer", "tab pictures"]
    assert asyncio.run(blocks.process_api(block_fn=fast, inputs=[None], state=state))["data"] == \
        ["Draw a digit"]
