"""Learning by experiment: `python -m vit.sweep` trains one model per combination of settings
(grid.py), each a normal checkpoint folder run by the trainer (runs.py), on this machine's cores or
on Ray (backends.py), and writes the table and plots (report.py)."""
