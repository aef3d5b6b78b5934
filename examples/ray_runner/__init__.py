"""A Ray ``Runner`` actor playing tool-using arithmetic episodes (user code: no agenttrace).

Modules: ``env`` (the environment and its tools), ``agent`` (a scripted tool-calling model
and the agent that chats with it), ``runner`` (the actor and the trajectory it returns),
``tracing`` (the runner's own tracer), ``driver`` (runs the tasks on two actors).
``agenttrace.toml`` and ``agenttrace_extractors`` are agenttrace's configuration for it;
nothing else here knows about agenttrace.
"""
