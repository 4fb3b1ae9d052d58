"""Strata's benchmark harness: the code behind scripts/bench_*.sh and scripts/validate_planner.sh.

One place runs the benchmark matrices (matrix.py), reads what the runs wrote (metrics.py) and
asks the planner for the analytic figures a run is compared with (explain.py), so that no script
re-derives a formula the C++ already computes. Each benchmark is one module with a `main()`;
`python3 -m bench NAME` runs it (PYTHONPATH=scripts). Standard library only.
"""
