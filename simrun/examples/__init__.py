"""The example plugin shipped with simrun: `heat` sweeps a 2-D heat-diffusion problem, one
unit per parameter point; `report` turns the sweep's ``summary.csv`` into markdown."""
