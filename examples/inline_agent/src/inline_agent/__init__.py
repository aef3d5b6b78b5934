"""An agent loop written inline: one method plays a whole episode (no per-step function).

Shaped like the rollout workers people write around an inference engine: ask the env for the
prompt, call the model, stop if the reply was cut, step the env, record the row; all inside
``Runner.run_episode``. The code never imports agenttrace.
"""
