"""Names like credentials are never recorded; LLM token counts and ids still are."""

from __future__ import annotations

import pytest
from conftest import read_run

import agenttrace as at
from agenttrace._secrets import is_secret_name

SECRET = [
    "api_key",
    "apiKey",
    "OPENAI_API_KEY",
    "X-Api-Key",
    "x-auth-token",
    "Authorization",
    "db_password",
    "passwd",
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "client_secret",
    "Cookie",
    "private_key",
    "session_key",
    "credentials",
    "Bearer",
]
NOT_SECRET = [
    "max_tokens",
    "tokens",
    "input_tokens",
    "token_ids",
    "token_id",
    "num_tokens",
    "prompt_token_count",
    "tokenizer",
    "secretary",
    "author",
    "keyboard",
    "keys",
    "observation",
    "monkey",
]


@pytest.mark.parametrize("name", SECRET)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRET)
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_llm_observations_with_token_fields_are_kept(pipeline) -> None:
    observation = {"token_ids": [1, 2, 3], "max_tokens": 64, "auth_token": "s3cr3t"}
    with at.episode():
        with at.env_step() as step:
            step.record(observation=observation, reward=1.0, terminated=True)
    (trajectory,) = read_run(pipeline).live
    assert trajectory.final_observation == {
        "token_ids": [1, 2, 3],
        "max_tokens": 64,
        "auth_token": "[REDACTED]",
    }


def test_decorated_episodes_register_their_env(pipeline) -> None:
    class Env:
        def step(self, action):
            return action

    env = Env()
    inner_ids = []

    @at.episode
    def play(env, nested: bool):
        if nested:
            play(env, nested=False)  # starts a new episode on the same env: outer abandoned
        inner_ids.append(at.current_episode_id())

    play(env, nested=True)
    statuses = {t.episode_id: t.status for t in read_run(pipeline).live}
    assert statuses[inner_ids[1]] == "abandoned"
    assert statuses[inner_ids[0]] == "completed"
