"""The example plugin shipped with simrun, registered through its own entry points.

`heat` sweeps a 2-D heat-diffusion problem over a grid of parameters, one unit per
parameter point; `report` turns the sweep's ``summary.csv`` into a markdown report. The
workflow ``examples/heat.yaml`` in the repository wires the two together for the demo.
"""
