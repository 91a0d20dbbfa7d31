"""The page's plain words: the glossary every caption links to, and answers said as people say
them ("probably a 7; maybe a 2"). Pure text, no Gradio: the captions, the pipeline strip and
the tour all take their terms from here, so a word means one thing everywhere on the page.

Numbers for people are counted from 1 (patch 1 is the top-left one; layer 1 the first); the
code counts from 0 and adds 1 only where it writes for people."""
from __future__ import annotations

# term -> (one plain sentence, the precise version). Order: as a reader meets them.
GLOSSARY: dict[str, tuple[str, str]] = {
    "patch": (
        "A small square of the picture; the model cuts every picture into a grid of them.",
        "The input (28×28 or 32×32 pixels for the bundled models) is cut into non-overlapping "
        "squares (4×4 px for the 514 k digit model: a 7×7 grid of 49 patches; 7×7 px for the "
        "139 k one: a 4×4 grid of 16; the strip's step 2 shows the grid of the model in use), "
        "numbered left to right, "
        "top to bottom, from 1. The bundled models' small convolution stem lets each patch see a "
        "pixel or two past its edge."),
    "token": (
        "What one patch becomes inside the model: a list of numbers that stands for it.",
        "Each patch's pixels go through a learned linear map to a vector of D numbers (its "
        "embedding), and a learned position vector is added so the token also says where the "
        "patch was. The transformer reads the tokens as a sequence, like words in a sentence."),
    "cls": (
        "[CLS] is one extra token with no pixels of its own; the answer is read from it.",
        "A learned vector put in front of the patch tokens (the first token). Through the layers "
        "it gathers information from the patches by attention; after the last layer a linear head "
        "turns it into one score per class (Dosovitskiy et al. 2020, after BERT)."),
    "layer": (
        "One round of the model's work: every token looks at the others, then is updated.",
        "A transformer layer: LayerNorm, multi-head self-attention, a residual add, LayerNorm, an "
        "MLP applied to each token on its own, another residual add. The bundled models have "
        "6; a converted ViT-B/16 has 12."),
    "head": (
        "One of several independent ways of looking within a layer; each can attend elsewhere.",
        "Multi-head attention splits each token's vector into H parts; each head has its own "
        "query, key and value maps and its own attention weights. Their outputs are joined."),
    "attention": (
        "How much one token takes from each other token; the weights add up to 100 %.",
        "softmax(q·k / √d) over all tokens, for one query token in one head: a row of the "
        "attention matrix. A map of [CLS]'s row shows which patches it drew from in that head "
        "— where it looked, not why the answer is what it is."),
    "rollout": (
        "All layers' attention combined into one map of where information flowed to [CLS].",
        "Attention rollout (Abnar & Zuidema 2020): each layer's head-averaged attention plus the "
        "identity (the residual path), renormalised and multiplied through the layers. It is "
        "the same for every class, so it shows where the model gathers, not why it chose."),
    "relevance": (
        "How much each patch pushed the answer towards the class shown.",
        "Gradient-weighted attention relevance (Chefer et al. 2021) for the chosen class: "
        "class-specific, unlike rollout. Checked against occlusion and by the deletion test "
        "in \"What drove the answer\"."),
    "occlusion": (
        "Hide one patch at a time and watch the answer drop: the bigger the drop, the more it "
        "rests there.",
        "Each patch (or square of patches) is replaced by the training images' background in "
        "turn and the class's probability measured again, its drop drawn on one scale for every "
        "input (0 to at least 20 %): a direct test of the model, slower than relevance."),
    "deletion": (
        "Which map to trust: hide the patches a map ranks first; the faster the answer fades, "
        "the better.",
        "Deletion test (Petsiuk et al. 2018): patches blanked in the map's order, the mean "
        "probability of the answer along the way (lower = more faithful), against random "
        "orders. Each model is measured on held-out validation images (python -m "
        "vit.fit_faithfulness) and the page leads with its best map."),
    "insertion": (
        "The deletion test run backwards: reveal the top-ranked patches first; the faster the "
        "answer returns, the better.",
        "Insertion (Petsiuk et al. 2018): patches put back on a blank input in the map's order; "
        "the mean probability of the answer along the way (higher = more faithful)."),
    "log-odds": (
        "Another scale for a probability that still moves when the model is nearly sure.",
        "log(P / (1 − P)): 99 % is 4.6, 99.9 % is 6.9. The scoreboard's model-randomisation check "
        "ranks occlusion's patches by the drop in log-odds: the same order as the drop in P, "
        "still told apart when the answer is so sure that hiding a patch barely moves P."),
    "rank": (
        "How alike two maps' orders of patches are, from −1 (reversed) to +1 (the same order).",
        "Spearman's rank correlation, ρ (written \"rho\" in the pictures): the correlation of "
        "the two maps' patch ranks. It compares maps on different scales, which their values "
        "cannot."),
    "lens": (
        "What each layer's tokens would answer if the model stopped right there.",
        "After each layer every token goes through the final LayerNorm and the classifier head "
        "(nostalgebraist 2020, for language models): where [CLS]'s answer settles, and which "
        "patch tokens already read as the class. Early layers were never trained to be read "
        "this way, so a flat early answer is not evidence of nothing known."),
    "calibrated": (
        "When it says 90 %, it is right about nine times in ten.",
        "The logits are divided by a temperature fitted on validation images (never the test "
        "set) so that confidence matches accuracy; the Test set tab's chart \"Is the confidence "
        "right?\" shows how well it holds there. Its ECE (expected calibration error) is the gap between "
        "confidence and accuracy, averaged over 15 bins of confidence: 0 % is perfect."),
}

TERMS = {"patch": "patch", "token": "token", "cls": "[CLS]", "layer": "layer", "head": "head",
         "attention": "attention", "rollout": "rollout", "relevance": "relevance",
         "occlusion": "occlusion", "deletion": "deletion test", "insertion": "insertion test",
         "log-odds": "log-odds", "rank": "rank correlation (rho)", "lens": "logit lens",
         "calibrated": "calibrated (temperature, ECE)"}


def glossary_markdown() -> str:
    """The glossary as Markdown: each term, its plain sentence, and the precise version."""
    rows = [f"- <span id=\"term-{key}\"></span>**{TERMS[key]}** — {plain} "
            f"<details><summary>precisely</summary>{precise}</details>"
            for key, (plain, precise) in GLOSSARY.items()]
    return "\n".join(rows)


def term(key: str, text: str | None = None) -> str:
    """A link to the glossary's entry for `key` (Markdown), showing `text` (default: the term)."""
    if key not in GLOSSARY:
        raise KeyError(key)
    return f"[{text or TERMS[key]}](#term-{key})"


def caption(plain: str, precise: str) -> str:
    """A caption: one plain sentence, and the precise version behind a "?" (HTML <details>,
    which Gradio's Markdown keeps: it opens in place, nothing else moves)."""
    return (f"{plain} <details class=\"precise\"><summary title=\"The precise version\" "
            f"aria-label=\"The precise version\">?"
            f"</summary>\n\n{precise}\n\n</details>")


def article(name: str) -> str:
    """"a" or "an" before a class name as people say it: an 8, an ankle boot, a 7, a ship."""
    s = name.strip("* ").lower()          # (a name in Markdown bold: "**8**")
    if not s:
        return "a"
    if s[0].isdigit():
        return "an" if s[0] == "8" or s in ("11", "18") else "a"        # eight, eleven
    return "an" if s[0] in "aeio" or (s[0] == "u" and not s.startswith(("uni", "use", "usu"))) else "a"


def unsure_words(first: str, second: str) -> str:
    """An unsure answer as a person says it: "probably a 7; maybe a 2"."""
    return f"Probably {article(first)} {first}; maybe {article(second)} {second}"



# What each picture on the page shows, for a screen reader (gr.Image's alt_text): said once
# here so that a picture's words and its label never drift apart.
ALT = {
    "glance": "The model's input with each patch coloured by how much the answer rests on it, "
              "by the map measured most faithful for this model; brighter = more.",
    "seen": "The model's input with its grid of patches, numbered in reading order.",
    "strip": "The token sequence: the [CLS] token first, then each patch in reading order.",
    "attention": "A grid of small maps, one per layer (rows) and head (columns): how much of "
                 "[CLS]'s attention each patch gets; brighter = more.",
    "rollout": "Attention rollout over the input: how much each patch flows into the final "
               "[CLS] over all layers; brighter = more.",
    "pick": "The input with its patches; the chosen patch is outlined. Click a patch to choose it.",
    "row": "Where the chosen patch looks in the chosen layer and head; brighter = more attention.",
    "relevance": "Relevance over the input: how much each patch raises the explained class's "
                 "score, followed back through the layers; brighter = more.",
    "occlusion": "Occlusion over the input: how much the explained class's probability changes "
                 "when each patch is blanked; brighter = a bigger change.",
    "sanity": "Each explanation map on the trained model (top row) and on a copy with its later "
              "layers re-initialised (bottom row).",
    "compare-strip": "The input through the second model: what it sees, its patches and its "
                     "attention.",
    "compare-maps": "[CLS] attention maps of matching layers: the page's model above, the second "
                    "model below.",
    "compare-differences": "Test images one model gets right and the other wrong, each with "
                           "both answers.",
    "lens-picture": "What each layer's tokens would answer if the model stopped there: one row "
                    "per layer, [CLS] first.",
    "mech-walk": "One token through one attention head: its query against every key, the "
                 "softmax weights, and the weighted sum of values.",
    "mech-position": "How alike the learned position embeddings of every pair of patches are, "
                     "one small map per patch.",
    "mech-distance": "Mean attention distance of each head, by layer: how far, in pixels, each "
                     "head looks.",
    "mech-filters": "The embedding filters: the pixel patterns that turn a patch into its token.",
    "confusion": "The confusion matrix of the test set: true classes in rows, predicted classes "
                 "in columns. Click a cell to list its images.",
    "reliability": "Accuracy per confidence bin on the test set, against the diagonal of perfect "
                   "calibration.",
    "learned-frame": "The input's attention and answer at the chosen moment of training.",
    "learned-picture": "The input's attention and answer at every kept moment of training, in "
                       "order.",
}


def alt(name: str) -> str:
    return ALT[name]
