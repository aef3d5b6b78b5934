"""agenttrace: OpenTelemetry for agent episodes."""
