"""User code that never imports agenttrace, instrumented in tests only through targets."""
