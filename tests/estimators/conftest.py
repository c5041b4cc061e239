"""Makes the brute-force reference (estimator_reference.py, beside this file) importable as
``import estimator_reference as ref`` from the estimator tests."""
import pathlib
import sys

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
