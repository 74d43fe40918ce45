"""care-lab: the research beside care-sdk: data loaders, training recipes, evaluations, benchmarks, plots.

It depends on :mod:`care_sdk` and never the reverse: nothing in ``care_sdk`` imports ``care_lab``.
Inside it, ``data`` (loaders, data roles, the test-read ledger) and ``simulation`` (simulated
users, episodes, the dialogue judge) are shared; ``training`` and ``evals`` use them and never
import each other, and ``bench`` does not import ``training`` (``tests/test_lab_layers.py``).
Its commands are reachable from the ``care`` command line (``care train``, ``care bench``,
``care eval``, ``care plot``) through the ``care_sdk.commands`` entry points it declares.

Examples:
    >>> import subprocess, sys  # importing the lab loads none of its parts
    >>> code = "import sys, care_lab; print(sorted(m for m in sys.modules if m.startswith('care_lab.')))"
    >>> subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    '[]'
"""
