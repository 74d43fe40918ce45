"""The bundled models and their add-ons: the only place where the backend spec ``default`` means anything.

- :mod:`care_sdk.bundled.backend`: the specs ``default`` (the bundled SmolLM2-135M with each role's
  adapter) and ``base``, which :func:`care_sdk.backends.resolve_backend` reaches through its scheme
  table; :mod:`care_sdk.bundled.adapters`: the bundled generator and evaluator adapters;
- add-ons outside the method, each off unless asked for, plugged into the core's seams
  (:mod:`care_sdk.addons`) by :mod:`care_sdk.bundled.addons`: the weights head
  (:mod:`~care_sdk.bundled.weights_head`), expected weights (:mod:`~care_sdk.bundled.expected_weights`)
  and context fit (:mod:`~care_sdk.bundled.context_fit`), named on the command line by
  ``--add-on NAME[=SPEC]`` (:mod:`care_sdk.cli_options`).

No core module and no transport imports this package.

Examples:
    >>> from care_sdk.bundled.adapters import bundled_adapter
    >>> bundled_adapter("generator").name
    'generator.gguf'
"""

__all__: list[str] = []  # the subpackages are the public surface
