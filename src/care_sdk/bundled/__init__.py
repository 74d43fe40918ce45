"""The bundled models and their add-ons: the only place where the backend spec ``default`` means anything.

- :mod:`care_sdk.bundled.adapters`: the bundled generator and evaluator adapters on SmolLM2-135M;
- add-ons outside the method, each off unless asked for: :mod:`~care_sdk.bundled.weights_head`,
  :mod:`~care_sdk.bundled.expected_weights` and :mod:`~care_sdk.bundled.context_fit`;
- :mod:`care_sdk.bundled.options`: their command-line options.

Examples:
    >>> from care_sdk.bundled.adapters import bundled_adapter
    >>> bundled_adapter("generator").name
    'generator.gguf'
"""
