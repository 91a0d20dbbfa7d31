"""The Draw tab: a Sketchpad whose brush is ready at load."""
from __future__ import annotations

from .gradio_patches import SafeSketchpad

# Keep the brush selected: Gradio's Sketchpad starts with no tool chosen (and drops the tool again
# after "Clear canvas"), showing "select the draw tool to start" while a visitor's drag draws nothing.
JS = """
() => {
  let queued = false;
  const pick = () => {
    queued = false;
    const pad = document.querySelector('#drawpad');
    if (!pad || !pad.innerText.includes('select the draw tool')) return;
    const brush = pad.querySelector('button[aria-label="Brush"]');
    if (brush) brush.click();
  };
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(pick); }
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
  pick();
}
"""
CSS = "#drawpad canvas { touch-action: none; }\n"


def build(noun: str):
    import gradio as gr
    # type="filepath" + SafeSketchpad: the layers reach vit.preprocessing as files, which checks
    # their pixel count before decoding (a 13000x13000 value must not be decoded in full).
    return SafeSketchpad(
        type="filepath", image_mode="RGBA", canvas_size=(500, 500),
        brush=gr.Brush(default_size=16, colors=["#000000"], color_mode="fixed"),
        eraser=gr.Eraser(default_size=24), layers=False, transforms=(),
        label=f"Draw a {noun} here (mouse, pen or finger)", elem_id="drawpad", height=560)
