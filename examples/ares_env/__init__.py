"""ARES-style async environments played concurrently by an asyncio agent loop (no agenttrace).

Modules: ``env`` (the async ``Environment`` interface, dm_env-style ``TimeStep`` and a
guess-the-number environment), ``agent`` (a bisection agent), ``loop`` (the loop that plays
the tasks concurrently and saves its own records). ``agenttrace.toml`` is agenttrace's
configuration for it; nothing else here knows about agenttrace.
"""
