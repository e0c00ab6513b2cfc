"""The test suite, one folder per architecture layer, plus end to end (``tests/e2e``).

``protocol``, ``llm``, ``engine``, ``storage`` (with the exports), ``rooms``, ``session``
(with speech), ``agui``, ``clients`` (``client/``, ``web/``, ``clients/js``), ``watch`` and
``harness`` test that layer; ``project`` the repository as a whole (layers, README,
compose, wheel, benchmarks, settings); ``e2e`` real worker processes and servers end to
end (``failover``, ``voice`` and ``browser`` below it).

A helper only one folder's tests use lives in that folder (``e2e`` counts with its
subfolders); a helper of several folders lives in ``support``. Fixtures are in the
``conftest.py`` of the folder whose tests share them. The repository root is
:data:`tests.paths.ROOT`. ``streams`` and ``worker_streams`` hold the recorded LLM streams.
The modules ``livekit_helpers``, ``worker_proc``, ``failover_helpers`` and ``storage_db``
here only keep old names importable for ``bench/``.
"""
