"""The notebooks' facades: each notebook imports what it calls from its own module here (notebook 01's is
:mod:`nbhelpers.analysis.baseline`). They sit above every other package, so one module can hand a notebook
its planning, measuring, analysis, tuning and plotting functions."""
