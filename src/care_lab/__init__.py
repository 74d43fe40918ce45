"""care-lab: the research beside care-sdk: data loaders, training recipes, evaluations, benchmarks, plots.

It depends on :mod:`care_sdk` and never the reverse: nothing in ``care_sdk`` imports ``care_lab``.
Its commands are reachable from the ``care`` command line (``care train``, ``care bench``,
``care eval``, ``care plot``) through the ``care_sdk.commands`` entry points it declares.

Examples:
    >>> import care_lab, sys
    >>> "care_lab.training" in sys.modules  # importing the lab loads none of its parts
    False
"""
