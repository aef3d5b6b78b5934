"""Plain user code for tests/test_propagate_patches.py: thread pools, httpx, aiohttp.

Nothing here imports agenttrace: it is traced through targets and ``AGENTTRACE_PROPAGATE``.
"""
