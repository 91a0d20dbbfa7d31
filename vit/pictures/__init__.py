"""Every picture the app and the CLIs draw, as numpy RGB arrays (no pyplot, no server).

- attention_maps.py: patches, heat maps, the layers x heads grid, colour bars, click geometry.
- mechanism_views.py: the step-by-step walk through a head and the Figure 7 views.
- confusion.py: the confusion matrix.
- reliability.py: the reliability diagram (matplotlib's object API).
"""
