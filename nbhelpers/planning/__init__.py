"""Planning: which configurations to measure, what can run on this device and why not, and list parsing.

Above ``measure`` (it builds RunConfigs) and below ``analysis``; the notebooks' grids, the kernel and padding
grids, the sweep's grid and the tuner's candidates all come from here:

- :mod:`~nbhelpers.planning.lists`: the one comma-list parser (``parse_list``);
- :mod:`~nbhelpers.planning.device`: what can run here and why not (Liger on a CPU, attention implementations,
  the kernel doctor's broken paths, a model family's refusals);
- :mod:`~nbhelpers.planning.kernel_grid`: one configuration per kernel backend (notebook 02, the kernel axis);
- :mod:`~nbhelpers.planning.padding_grid`: kernels x padding strategy x attention (notebook 03);
- :mod:`~nbhelpers.planning.candidates`: the tuner's search space;
- :mod:`~nbhelpers.planning.sweep_grid`: the sweep's grid points and the notebooks' declared parameters.
"""
