"""agenttrace: OpenTelemetry for agent episodes.

One instrumentation, two products: ``episode > timestep > env.step`` spans for Jaeger and
Grafana, and the full trajectories (observations, actions, rewards, termination, LLM calls)
rebuilt from those spans for training::

    import agenttrace as at

    with at.episode(task_id="cartpole", env=env) as ep:
        with at.env_reset() as reset:
            obs, info = reset.record_result(env.reset(seed=0))
        done = False
        while not done:
            with at.timestep():
                with at.agent_act() as act:
                    action = policy(obs)
                    act.record(observation=obs, action=action)
                with at.env_step() as step:
                    obs, reward, terminated, truncated, info = step.record_result(env.step(action))
            done = terminated or truncated
"""

from agenttrace import reading as _reading
from agenttrace import sinks as _sinks
from agenttrace._version import __version__
from agenttrace.config import ConfigError
from agenttrace.instrument.episode_state import current_episode_id
from agenttrace.instrument.extractors import StepResult, extract_step
from agenttrace.instrument.spans import (
    agent_act,
    env_closed,
    env_reset,
    env_step,
    episode,
    llm_call,
    score,
    timestep,
    tool_call,
)
from agenttrace.pipeline import AgentTrace, configure, force_flush, get_default, shutdown
from agenttrace.processing.span_export import LosslessSpanProcessor
from agenttrace.processing.trajectory_processor import TrajectoryProcessor
from agenttrace.trajectory import (
    Conventions,
    EpisodeError,
    LLMCall,
    SpanRecord,
    Step,
    StreamingAssembler,
    ToolCall,
    Trajectory,
    TrajectoryFormatError,
    UnserializableValueWarning,
    assemble,
    build_trajectory,
)

# Loading moved from agenttrace.sinks to agenttrace.reading: sinks write, reading loads, and
# sinks never import reading. Code written as ``from agenttrace.sinks import load_trajectories``
# keeps working: this module, above both, puts the names it used back where they were.
for _name in ("TrajectoryLoadError", "iter_trajectories", "load_trajectories", "read_step_tables"):
    setattr(_sinks, _name, getattr(_reading, _name))
del _name

__all__ = (
    # tracing API
    "agent_act",
    "current_episode_id",
    "env_closed",
    "env_reset",
    "env_step",
    "episode",
    "extract_step",
    "llm_call",
    "score",
    "timestep",
    "tool_call",
    "StepResult",
    # setup
    "AgentTrace",
    "ConfigError",
    "configure",
    "force_flush",
    "get_default",
    "shutdown",
    # processing
    "LosslessSpanProcessor",
    "TrajectoryProcessor",
    # trajectories
    "Conventions",
    "EpisodeError",
    "LLMCall",
    "SpanRecord",
    "Step",
    "StreamingAssembler",
    "ToolCall",
    "Trajectory",
    "TrajectoryFormatError",
    "UnserializableValueWarning",
    "assemble",
    "build_trajectory",
    "__version__",
)
