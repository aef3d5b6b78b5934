"""``agenttrace view``'s page in a real headless Chromium (Debian's, driven by Playwright),
against the real viewer server on real runs: what the page shows is checked against the
trajectories file read back with :func:`agenttrace.reading.load_trajectories`.

Each test leaves a screenshot in ``test-artifacts/view/<test name>.png``. Without chromium or
playwright the tests skip, or fail under ``AGENTTRACE_REQUIRE_CHROMIUM=1`` (tests/browser.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from browser import VIEWPORT, block_other_hosts, browser_or_skip, launch, screenshot_path
from conftest import clean_environ

from agenttrace import Step, Trajectory
from agenttrace.reading import load_trajectories

pytestmark = pytest.mark.timeout(240)

#: How long the page may take to show what the server has (ms).
WAIT_MS = 20_000
#: The demo's seed: a run of 50 episodes with errored ones among them (checked, not assumed).
DEMO_SEED = "6"


# ---- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    browser_or_skip()
    with launch() as chromium:
        yield chromium


@pytest.fixture
def viewer() -> Iterator[Callable[..., Any]]:
    """Starts the real viewer server on paths; every one started is stopped at the end."""
    from agenttrace.view.server import ViewServer

    started = []

    def start(*paths: Path, follow: bool = True) -> Any:
        server = ViewServer([str(p) for p in paths], host="127.0.0.1", port=0, follow=follow)
        started.append(server.start())
        assert server.index.wait_idle(60), "the viewer did not finish indexing"
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def page(browser: Any, viewer: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A 1280x800 page that reaches 127.0.0.1 only; its screenshot is taken at the end (pass
    or fail), and any script error or console error fails the test."""
    context = browser.new_context(viewport=VIEWPORT)
    block_other_hosts(context)
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield tab
    try:
        tab.screenshot(path=str(screenshot_path(request.node.name)))
    finally:
        context.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``agenttrace demo``: a real run of 50 episodes in a runs folder of its own."""
    runs = tmp_path_factory.mktemp("demo") / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "agenttrace", "demo", "--out", str(runs), "--seed", DEMO_SEED],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return runs


def demo_file(runs: Path) -> Path:
    (found,) = runs.glob("*/trajectories.jsonl")
    return found


# ---- page helpers -----------------------------------------------------------------------


def table_ready(page: Any, query_part: str = "") -> None:
    selector = '[data-testid=episodes-table][data-state="ready"]'
    if query_part:
        selector += f'[data-query*="{query_part}"]'
    page.wait_for_selector(selector)


def shown_rows(page: Any) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        "[data-testid=episode-row]",
        """rows => rows.map(r => ({
            key: Number(r.dataset.key), episode_id: r.dataset.episodeId,
            status: r.dataset.status,
            ret: r.querySelector('[data-testid=row-return]').dataset.value,
            error: r.querySelector('.error-cell').textContent}))""",
    )


def keys_by_episode(page: Any) -> dict[str, int]:
    return {row["episode_id"]: row["key"] for row in shown_rows(page)}


def texts_of(content: Any) -> list[str]:
    """The text blocks a message's content shows: the string, or its text parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            part if isinstance(part, str) else part["text"]
            for part in content
            if isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")
        ]
    return []


def expected_messages(messages: Any, part: str, default_role: str) -> list[dict[str, Any]]:
    if messages is None:
        return []
    listed = messages if isinstance(messages, list) else [messages]
    out = []
    for message in listed:
        if not isinstance(message, dict):
            message = {"role": default_role, "content": message}
        out.append({"role": message["role"], "part": part, "texts": texts_of(message["content"])})
    return out


# ---- tests ------------------------------------------------------------------------------


def test_errored_filter_shows_exactly_the_errored_episodes(demo_run, viewer, page):
    truth = load_trajectories(demo_file(demo_run))
    errored = {t.episode_id: t for t in truth if t.status == "errored"}
    assert errored, "the demo run has errored episodes (its seed was picked for that)"
    server = viewer(demo_run)  # the runs folder, as `agenttrace view agenttrace_runs/`
    page.goto(server.url)
    table_ready(page)
    page.wait_for_selector(f'[data-testid=episode-count][data-count="{len(truth)}"]')
    # The counts by status are the file's.
    counts = page.eval_on_selector_all(
        "[data-testid=status-count]", "cs => cs.map(c => [c.dataset.status, c.dataset.count])"
    )
    assert {status: int(n) for status, n in counts} == {
        status: sum(t.status == status for t in truth) for status in {t.status for t in truth}
    }
    assert page.locator("[data-testid=return-histogram] canvas").count() > 0

    page.check('[data-testid=filter-status] input[data-status="errored"]')
    table_ready(page, "status=errored")
    rows = shown_rows(page)
    assert sorted(row["episode_id"] for row in rows) == sorted(errored)
    for row in rows:
        t = errored[row["episode_id"]]
        assert row["status"] == "errored"
        assert float(row["ret"]) == t.return_
        assert row["error"] == f"{t.error.type}: {t.error.message}"
    assert page.locator("[data-testid=matching-count]").get_attribute("data-count") == str(
        len(errored)
    )
    assert "status=errored" in page.evaluate("location.hash")

    # "errors only" instead: the episodes whose record has an error.
    page.uncheck('[data-testid=filter-status] input[data-status="errored"]')
    page.check("[data-testid=filter-errors]")
    table_ready(page, "errors=1")
    assert sorted(row["episode_id"] for row in shown_rows(page)) == sorted(
        t.episode_id for t in truth if t.error is not None
    )

    # Sorted by return (highest first), all episodes: the file's returns in that order.
    page.uncheck("[data-testid=filter-errors]")
    table_ready(page)
    page.click("[data-testid=sort-return]")
    table_ready(page, "sort=return")
    shown = [float(row["ret"]) for row in shown_rows(page)]
    assert shown == sorted((t.return_ for t in truth), reverse=True)[: len(shown)]


def test_episode_page_shows_the_file_s_steps_rewards_and_transcript(demo_run, viewer, page):
    truth = load_trajectories(demo_file(demo_run))
    # The longest episode that errored if one did (its error shown too), else the longest.
    chosen = max(truth, key=lambda t: (t.status == "errored", len(t.steps)))
    server = viewer(demo_run)
    page.goto(server.url)
    table_ready(page)
    page.click(f'[data-testid=episode-row][data-episode-id="{chosen.episode_id}"]')
    page.wait_for_selector('[data-testid=page-episode][data-state="ready"]')
    assert page.locator("[data-testid=episode-id]").inner_text() == chosen.episode_id
    assert float(page.get_attribute("[data-testid=episode-return]", "data-value")) == (
        chosen.return_
    )
    assert page.get_attribute("[data-testid=episode-status]", "data-status") == chosen.status
    assert page.locator("[data-testid=episode-task]").inner_text() == chosen.task_id
    if chosen.error is not None:
        assert page.locator("[data-testid=error-type]").inner_text() == chosen.error.type
        assert page.locator("[data-testid=error-message]").inner_text() == chosen.error.message
        assert page.locator("[data-testid=error-stack]").text_content() == chosen.error.stack
    assert page.locator("[data-testid=step-chart] canvas").count() > 0

    steps = page.eval_on_selector_all(
        "[data-testid=step-row]",
        """rows => rows.map(r => ({
            step: Number(r.dataset.step),
            reward: r.querySelector('[data-testid=step-reward]').dataset.value,
            cumulative: r.querySelector('[data-testid=step-cumulative]').dataset.value,
            terminated: r.querySelector('[data-testid=step-terminated]').dataset.value,
            truncated: r.querySelector('[data-testid=step-truncated]').dataset.value}))""",
    )
    assert [s["step"] for s in steps] == [step.index for step in chosen.steps]
    total = 0.0
    for shown, step in zip(steps, chosen.steps, strict=True):
        if step.reward is None:  # a step that failed earned nothing
            assert shown["reward"] == ""
        else:
            assert float(shown["reward"]) == step.reward
            total += step.reward
        assert float(shown["cumulative"]) == total
        assert shown["terminated"] == str(step.terminated).lower()
        assert shown["truncated"] == str(step.truncated).lower()
    assert total == pytest.approx(chosen.return_)

    # A step opens to its observation, action and info.
    first = chosen.steps[0]
    page.click('[data-testid=step-row][data-step="0"]')
    observation = page.eval_on_selector_all(
        '[data-testid=step-detail][data-step="0"] [data-testid=step-observation] tr',
        "rows => rows.map(r => [r.querySelector('th').textContent,"
        " r.querySelector('td').textContent])",
    )
    assert dict(observation) == {key: str(value) for key, value in first.observation.items()}
    action = page.locator('[data-testid=step-detail][data-step="0"] [data-testid=step-action]')
    assert action.locator(".value").first.text_content() == str(first.action)

    # The transcript: every call's messages (role and text) in order, tokens and latency;
    # every tool call.
    shown_calls = page.eval_on_selector_all(
        "[data-testid=llm-call]",
        """calls => calls.map(c => ({
            step: Number(c.dataset.step), call: Number(c.dataset.call),
            input: c.querySelector('[data-testid=llm-tokens]').dataset.input,
            output: c.querySelector('[data-testid=llm-tokens]').dataset.output,
            ms: c.querySelector('[data-testid=llm-latency]').dataset.ms,
            model: c.querySelector('[data-testid=llm-model]').textContent,
            messages: [...c.querySelectorAll('[data-testid=message]')].map(m => ({
                role: m.dataset.role, part: m.dataset.part,
                texts: [...m.querySelectorAll('[data-testid=message-text]')]
                    .map(t => t.textContent)}))}))""",
    )
    expected_calls = [
        (step, number, call) for step in chosen.steps for number, call in enumerate(step.llm_calls)
    ]
    assert expected_calls, "demo steps make model calls"
    assert [(c["step"], c["call"]) for c in shown_calls] == [
        (step.index, number) for step, number, _ in expected_calls
    ]
    for shown, (_, _, call) in zip(shown_calls, expected_calls, strict=True):
        assert shown["messages"] == expected_messages(
            call.input_messages, "input", "user"
        ) + expected_messages(call.output_messages, "output", "assistant")
        assert int(shown["input"]) == call.input_tokens
        assert int(shown["output"]) == call.output_tokens
        # (times since the epoch in ns are past 2**53: JavaScript numbers hold them to 256 ns)
        assert float(shown["ms"]) == pytest.approx(
            (call.end_time - call.start_time) / 1e6, abs=1e-3
        )
        assert shown["model"] == call.model
    tools = page.eval_on_selector_all(
        "[data-testid=tool-call]", "ts => ts.map(t => [Number(t.dataset.step), t.dataset.name])"
    )
    assert tools == [[step.index, call.name] for step in chosen.steps for call in step.tool_calls]


def test_plots_page_draws_the_episodes_its_filters_keep(demo_run, viewer, page):
    truth = load_trajectories(demo_file(demo_run))
    kept = [t for t in truth if t.status in ("completed", "truncated")]
    server = viewer(demo_run)
    page.goto(f"{server.url}#/plots?status=completed,truncated")
    page.wait_for_selector('[data-testid=page-plots][data-state="ready"]')
    assert page.get_attribute("[data-testid=page-plots]", "data-points") == str(len(kept))
    for plot in ("plot-return", "plot-length", "plot-step-ms", "plot-llm-ms", "plot-tokens"):
        assert page.locator(f"[data-testid={plot}] canvas").count() > 0, plot
    assert page.is_checked('[data-testid=filter-status] input[data-status="completed"]')
    # One more status ticked: the plots follow, and so does the address.
    page.check('[data-testid=filter-status] input[data-status="errored"]')
    three = sum(t.status in ("completed", "truncated", "errored") for t in truth)
    page.wait_for_selector(f'[data-testid=page-plots][data-state="ready"][data-points="{three}"]')
    assert "errored" in page.evaluate("decodeURIComponent(location.hash)")


def _episode(episode_id: str, observations: list[Any], actions: list[Any], rewards: list[float],
             task: str = "compare-task") -> Trajectory:  # fmt: skip
    steps = [
        Step(
            index=i,
            observation=obs,
            action=action,
            reward=reward,
            terminated=i == len(observations) - 1,
            start_time=1_700_000_000_000_000_000 + i * 1_000_000,
            end_time=1_700_000_000_000_000_000 + (i + 1) * 1_000_000,
        )
        for i, (obs, action, reward) in enumerate(zip(observations, actions, rewards, strict=True))
    ]
    return Trajectory(
        episode_id=episode_id,
        task_id=task,
        start_time=1_700_000_000_000_000_000,
        end_time=1_700_000_000_000_000_000 + len(steps) * 1_000_000,
        return_=sum(rewards),
        length=len(steps),
        steps=steps,
    )


def test_compare_marks_the_first_differing_step(tmp_path, viewer, page):
    rng = np.random.default_rng(34)
    n = 6
    observations = [rng.integers(0, 9, size=3).astype(np.int64) for _ in range(n)]
    actions = [int(a) for a in rng.integers(0, 4, size=n)]
    rewards = [float(r) for r in rng.normal(size=n).round(3)]
    k_action = int(rng.integers(1, n - 1))  # where B's actions leave A's
    k_obs = int(rng.integers(0, n - 1))  # the one observation D changes
    changed_obs = [o.copy() for o in observations]
    changed_obs[k_obs][0] += 1
    a = _episode("episode-a", observations, actions, rewards)
    b = _episode(
        "episode-b", observations, actions[:k_action] + [x + 1 for x in actions[k_action:]], rewards
    )
    c = _episode("episode-c", [o.copy() for o in observations], list(actions), list(rewards))
    d = _episode("episode-d", changed_obs, list(actions), list(rewards))
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in (a, b, c, d)))
    truth = {t.episode_id: t for t in load_trajectories(path)}

    def first_difference(x: Trajectory, y: Trajectory) -> int | None:
        for sx, sy in zip(x.steps, y.steps, strict=True):
            if sx.observation.tolist() != sy.observation.tolist() or sx.action != sy.action:
                return sx.index
            if sx.reward != sy.reward:
                return sx.index
        return None

    server = viewer(path)
    page.goto(server.url)
    table_ready(page)
    keys = keys_by_episode(page)

    # A and B, picked in the table and compared.
    page.check('[data-testid=episode-row][data-episode-id="episode-a"] [data-testid=pick-episode]')
    page.check('[data-testid=episode-row][data-episode-id="episode-b"] [data-testid=pick-episode]')
    page.click("[data-testid=compare-button]")
    page.wait_for_selector('[data-testid=page-compare-episodes][data-state="ready"]')
    expected = first_difference(truth["episode-a"], truth["episode-b"])
    assert expected is not None
    marked = page.locator("tr.first-difference")
    assert marked.count() == 1
    assert marked.get_attribute("data-step") == str(expected)
    line = page.locator("[data-testid=first-difference]")
    assert line.inner_text().startswith(f"first difference at step {expected}")
    assert line.get_attribute("data-step") == str(expected)
    rows = page.eval_on_selector_all(
        "[data-testid=compare-row]",
        """rows => rows.map(r => [Number(r.dataset.step),
            [...r.querySelectorAll('[data-testid=compare-reward]')].map(c => c.dataset.value)])""",
    )
    assert [[step, [float(v) for v in values]] for step, values in rows] == [
        [sa.index, [sa.reward, sb.reward]]
        for sa, sb in zip(truth["episode-a"].steps, truth["episode-b"].steps, strict=True)
    ]

    # A and D: one observation differs, the steps after it are equal again.
    page.goto(f"{server.url}#/compare/episodes?a={keys['episode-a']}&b={keys['episode-d']}")
    page.wait_for_selector('[data-testid=page-compare-episodes][data-state="ready"]')
    expected = first_difference(truth["episode-a"], truth["episode-d"])
    assert page.locator("tr.first-difference").get_attribute("data-step") == str(expected)
    assert (
        page.locator("[data-testid=first-difference]")
        .inner_text()
        .startswith(f"first difference at step {expected}")
    )

    # A and C: the same steps.
    assert first_difference(truth["episode-a"], truth["episode-c"]) is None
    page.goto(f"{server.url}#/compare/episodes?a={keys['episode-a']}&b={keys['episode-c']}")
    page.wait_for_selector('[data-testid=page-compare-episodes][data-state="ready"]')
    assert page.locator("[data-testid=first-difference]").inner_text() == "no difference"
    assert page.locator("tr.first-difference").count() == 0
    assert page.locator("[data-testid=compare-row]").count() == n


def test_an_episode_appended_while_watching_shows_without_a_reload(tmp_path, viewer, page):
    run = tmp_path / "live-run"
    run.mkdir()
    path = run / "trajectories.jsonl"
    first = [
        _episode(f"live-{i}", [[i, j] for j in range(3)], [j for j in range(3)], [0.5, 0.25, 1.0])
        for i in range(3)
    ]
    path.write_text("".join(t.to_json() + "\n" for t in first))
    server = viewer(run, follow=True)
    page.goto(server.url)
    table_ready(page)
    before = len(load_trajectories(path))
    page.wait_for_selector(f'[data-testid=episode-count][data-count="{before}"]')
    assert page.locator("[data-testid=episode-row]").count() == before
    page.evaluate("window.__same_page = true")  # gone if the page reloads

    # Its task is markup: shown as text, never run.
    markup = '<img src=x onerror="window.__injected = true"><b>task</b>'
    extra = _episode("live-appended", [[9, 9], [9, 8]], [1, 0], [2.0, -1.0], task=markup)
    with path.open("a", encoding="utf-8") as out:
        out.write(extra.to_json() + "\n")
        out.flush()
        os.fsync(out.fileno())
    after = load_trajectories(path)
    assert len(after) == before + 1

    page.wait_for_selector(
        f'[data-testid=episode-count][data-count="{len(after)}"]', timeout=WAIT_MS
    )
    page.wait_for_selector(
        '[data-testid=episode-row][data-episode-id="live-appended"]', timeout=WAIT_MS
    )
    page.wait_for_selector(
        f'[data-testid=status-total][data-count="{len(after)}"]', timeout=WAIT_MS
    )
    assert page.evaluate("window.__same_page") is True
    row = page.locator('[data-testid=episode-row][data-episode-id="live-appended"]')
    assert row.locator('td[data-col="task_id"]').text_content() == markup
    assert row.locator("img, b").count() == 0
    assert page.evaluate("window.__injected") is None
    assert sorted(row["episode_id"] for row in shown_rows(page)) == sorted(
        t.episode_id for t in after
    )
    assert page.locator("[data-testid=live-status]").inner_text() == "● live"


def _frame(state: np.ndarray, height: int = 60, width: int = 90) -> np.ndarray:
    """An RGB picture of a CartPole state: the cart at its position, the pole at its angle."""
    frame = np.full((height, width, 3), 255, dtype=np.uint8)
    frame[height - 12, :] = (90, 90, 90)  # the track
    cx = int(np.clip((state[0] + 2.4) / 4.8 * (width - 1), 6, width - 7))
    frame[height - 18 : height - 11, cx - 6 : cx + 7] = (40, 90, 200)  # the cart
    for r in range(30):
        x = int(np.rint(cx + r * np.sin(state[2])))
        y = int(np.rint(height - 18 - r * np.cos(state[2])))
        if 0 <= y < height and 0 <= x < width:
            frame[y, max(0, x - 1) : x + 2] = (200, 120, 40)  # the pole
    return frame


def test_an_image_shaped_observation_is_drawn_on_a_canvas(tmp_path, viewer, page):
    env = gym.make("CartPole-v1")
    state, _ = env.reset(seed=34)
    rng = np.random.default_rng(34)
    steps = []
    done = False
    while not done and len(steps) < 4:
        action = int(rng.integers(0, 2))
        observation = {
            "pixels": _frame(state),  # uint8 (60, 90, 3): written as raw bytes (b64)
            "gray": rng.integers(0, 256, size=(6, 8)).astype(np.uint8),  # 2-D, nested lists
            "alpha": rng.integers(0, 256, size=(4, 5, 1)) / 255.0,  # floats in 0..1
            "state": state,  # float32 (4,): numbers, not a picture
        }
        state, reward, terminated, truncated, _ = env.step(action)
        steps.append(
            Step(
                index=len(steps),
                observation=observation,
                action=action,
                reward=float(reward),
                terminated=terminated,
                truncated=truncated,
            )
        )
        done = terminated or truncated
    env.close()
    episode = Trajectory(
        episode_id="cartpole-pixels",
        task_id="CartPole-v1",
        return_=sum(s.reward for s in steps),
        length=len(steps),
        steps=steps,
    )
    path = tmp_path / "trajectories.jsonl"
    path.write_text(episode.to_json() + "\n")
    (truth,) = load_trajectories(path)

    server = viewer(path)
    page.goto(server.url)
    table_ready(page)
    page.click('[data-testid=episode-row][data-episode-id="cartpole-pixels"]')
    page.wait_for_selector('[data-testid=page-episode][data-state="ready"]')
    index = len(truth.steps) - 1
    page.click(f'[data-testid=step-row][data-step="{index}"]')
    detail = page.locator(f'[data-testid=step-detail][data-step="{index}"]')
    detail.locator("[data-testid=ndarray-image]").first.wait_for()
    detail.scroll_into_view_if_needed()
    observation = truth.steps[index].observation

    canvases = detail.locator("[data-testid=ndarray-image]")
    shapes = sorted(canvases.evaluate_all("cs => cs.map(c => c.dataset.shape)"))
    assert shapes == sorted(
        "x".join(map(str, observation[k].shape)) for k in ("pixels", "gray", "alpha")
    )
    for name, array in ((k, observation[k]) for k in ("pixels", "gray", "alpha")):
        shape = "x".join(map(str, array.shape))
        pixels = page.evaluate(
            """shape => {
                const c = document.querySelector(
                    `[data-testid=step-detail] canvas[data-shape="${shape}"]`);
                return [c.width, c.height,
                        Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)];
            }""",
            shape,
        )
        width, height, rgba = pixels
        assert (height, width) == array.shape[:2], name
        rgba = np.array(rgba, dtype=np.uint8).reshape(height, width, 4)
        expected = np.rint(array * 255).astype(np.uint8) if array.dtype.kind == "f" else array
        if expected.ndim == 2:
            expected = expected[:, :, None]
        if expected.shape[2] == 1:
            expected = np.repeat(expected, 3, axis=2)
        assert np.array_equal(rgba[:, :, :3], expected), name
        assert (rgba[:, :, 3] == 255).all(), name
    # The state vector is shown as its numbers.
    state_box = detail.locator('[data-testid=ndarray][data-shape="4"]')
    assert state_box.locator("canvas").count() == 0
    numbers = state_box.locator(".array-numbers").inner_text()
    shown = [float(x) for x in numbers.strip("[]").split(",")]
    assert shown == pytest.approx(observation["state"].tolist(), abs=5e-6)
