"""A Safactory-style HTTP Interactor: async workers, a pool of env actors, an LLM, SQLite rows.

Plain user code: nothing here imports agenttrace. ``run.sh`` (or the command in README.md)
traces it through configuration only: ``agenttrace.toml`` names the functions to trace and
``tracing.env`` holds the OpenTelemetry settings.
"""
