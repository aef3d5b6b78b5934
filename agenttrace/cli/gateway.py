"""``agenttrace gateway`` and ``agenttrace run``: agents that no one instrumented, recorded from
the model API calls they make (docs/gateway.md).

``gateway`` runs the capture gateway in the foreground. ``run -- CMD ARGS`` starts one for its
child (or uses a running one, ``--gateway URL``), points the child's ``OPENAI_BASE_URL`` and
``ANTHROPIC_BASE_URL`` at a fresh episode's path, runs it, and ends the episode with the
child's exit: 0 completes it; a signal or another code ends it errored, with the code. With
``--tasks FILE`` it runs the command once per task (``{task}`` in the command is replaced),
``--concurrency`` at a time, with a progress bar.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import agenttrace as at
from agenttrace.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from agenttrace.cli.export_args import int_at_least
from agenttrace.collect.http_server import parse_address, serving_until_signalled
from agenttrace.gateway import Gateway, GatewaySettings
from agenttrace.gateway.routes import DEFAULT_PREFIXES

GATEWAY_EPILOG = (
    "Exit status: 0 stopped cleanly (SIGINT or SIGTERM); 1 it could not start (an address in "
    "use, aiohttp missing); 2 bad arguments (an address beyond loopback without --expose and "
    "--key, a bad prefix)."
)
RUN_EPILOG = (
    "Exit status: 0 the command exited 0 (with --tasks: every task did); otherwise the "
    "command's own exit code (128 + N for a signal; with --tasks: 1 when any task failed); 1 "
    "the gateway could not start or the command could not be run; 2 bad arguments."
)


def add_parsers(commands: Any) -> None:
    gateway = commands.add_parser(
        "gateway",
        help="record any agent's model calls (OpenAI, Anthropic APIs) on their way upstream",
        description="A gateway between agents and their model server: every call it forwards "
        "is recorded as a step of its episode (docs/gateway.md).",
        epilog=GATEWAY_EPILOG,
    )
    _upstream_options(gateway)
    gateway.add_argument(
        "--listen",
        default="127.0.0.1:4000",
        metavar="HOST:PORT",
        help="where it listens (default %(default)s)",
    )
    gateway.add_argument(
        "--expose",
        action="store_true",
        help="allow listening beyond loopback (needs --key)",
    )
    gateway.add_argument(
        "--key",
        metavar="KEY",
        help="a key clients must send (Authorization: Bearer KEY or x-api-key); the upstream "
        "then gets --upstream-key-env's key instead",
    )
    gateway.add_argument(
        "--prefix",
        action="append",
        default=[],
        metavar="TEMPLATE",
        help="another path prefix naming the episode, e.g. /runs/{run}/{episode} (the "
        f"defaults stay: {', '.join(DEFAULT_PREFIXES)})",
    )
    gateway.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="an episode no call came to for this long ends (default %(default)s)",
    )

    run = commands.add_parser(
        "run",
        help="run an agent command with its model calls recorded as an episode",
        description="Run CMD with OPENAI_BASE_URL and ANTHROPIC_BASE_URL pointing at a "
        "gateway path of a fresh episode; the episode ends with the command's exit "
        "(docs/gateway.md).",
        epilog=RUN_EPILOG,
    )
    _upstream_options(run)
    run.add_argument("--gateway", metavar="URL", help="a running agenttrace gateway to use instead")
    run.add_argument("--task", metavar="T", help="the episode's task id")
    run.add_argument("--group", metavar="G", help="the episode's group id (rollout groups)")
    run.add_argument("--episode", metavar="ID", help="the episode id (default: a new one)")
    run.add_argument(
        "--tasks",
        metavar="FILE",
        help="run CMD once per line of FILE (a task id each; {task} in CMD is replaced)",
    )
    run.add_argument(
        "--concurrency",
        type=int_at_least(1, "at least 1"),
        default=1,
        metavar="N",
        help="with --tasks: how many run at once (default %(default)s)",
    )
    run.add_argument(
        "child", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the agent command"
    )


def _upstream_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--upstream",
        metavar="URL",
        help="the model server (OpenAI- or Anthropic-compatible), e.g. http://127.0.0.1:8000",
    )
    parser.add_argument(
        "--upstream-key-env",
        metavar="VAR",
        help="environment variable holding the upstream's API key (with --key)",
    )
    parser.add_argument(
        "--tokens",
        action="store_true",
        help="ask the upstream (vLLM, SGLang) for token ids and logprobs and record them; "
        "the client's answer is as it asked",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="upstream read timeout (default %(default)s)",
    )


def _settings(args: argparse.Namespace) -> GatewaySettings:
    if not args.upstream:
        raise ValueError("--upstream is required (the model server's URL)")
    if not args.upstream.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {args.upstream!r} is not an http(s) URL")
    upstream_key = os.environ.get(args.upstream_key_env) if args.upstream_key_env else None
    return GatewaySettings(
        upstream=args.upstream,
        prefixes=(*DEFAULT_PREFIXES, *getattr(args, "prefix", [])),
        tokens=args.tokens,
        timeout=args.timeout,
        idle_timeout=getattr(args, "idle_timeout", 300.0),
        key=getattr(args, "key", None),
        upstream_key=upstream_key,
    )


def run_gateway(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        settings = _settings(args)
        host, port = parse_address(args.listen)
        gateway = Gateway(settings, host, port, exposed=args.expose)
    except ValueError as exc:
        err.print(f"agenttrace gateway: error: {exc}")
        return EXIT_USAGE
    if settings.tokens:
        at.configure(tokens=True)
    with serving_until_signalled() as wait_for_signal:
        try:
            try:
                gateway.start()
            except OSError as exc:
                err.print(f"agenttrace gateway: error: cannot start: {exc}")
                return EXIT_FAILURE
            err.print(
                f"agenttrace gateway: {gateway.url} -> {settings.upstream}; point clients at "
                f"{gateway.url}/v1 (or {gateway.url}/e/EPISODE/v1); Ctrl-C to stop"
            )
            wait_for_signal()
        finally:
            gateway.stop()
            at.shutdown()
    return EXIT_OK


def run_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    command = list(args.child)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        err.print("agenttrace run: error: no command given (agenttrace run [options] -- CMD ...)")
        return EXIT_USAGE
    gateway = None
    try:
        if args.gateway:
            base = args.gateway.rstrip("/")
        else:
            settings = _settings(args)
            if settings.tokens:
                at.configure(tokens=True)
            gateway = Gateway(settings, "127.0.0.1", 0).start()
            base = gateway.url
    except ValueError as exc:
        err.print(f"agenttrace run: error: {exc}")
        return EXIT_USAGE
    except OSError as exc:
        err.print(f"agenttrace run: error: the gateway could not start: {exc}")
        return EXIT_FAILURE
    try:
        if args.tasks:
            return _run_tasks(args, command, base, gateway, err)
        episode_id = args.episode or uuid.uuid4().hex
        code = _run_one(command, base, gateway, episode_id, args.task, args.group, err)
        return code if code >= 0 else 128 - code
    finally:
        if gateway is not None:
            gateway.stop()
        at.shutdown()


def _run_tasks(
    args: argparse.Namespace, command: list[str], base: str, gateway: Any, err: Console
) -> int:
    try:
        tasks = [line.strip() for line in Path(args.tasks).read_text().splitlines()]
    except OSError as exc:
        err.print(f"agenttrace run: error: cannot read --tasks {args.tasks}: {exc}")
        return EXIT_FAILURE
    tasks = [task for task in tasks if task]
    codes: list[int] = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=not err.is_terminal,
    ) as progress:  # fmt: skip
        bar = progress.add_task("episodes", total=len(tasks))

        def one(task: str) -> int:
            argv = [part.replace("{task}", task) for part in command]
            code = _run_one(argv, base, gateway, uuid.uuid4().hex, task, args.group, err)
            progress.advance(bar)
            return code

        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            codes = list(pool.map(one, tasks))
    failed = sum(1 for code in codes if code != 0)
    err.print(f"agenttrace run: {len(codes)} episodes, {failed} failed")
    return EXIT_OK if failed == 0 else EXIT_FAILURE


def _run_one(
    command: list[str],
    base: str,
    gateway: Any,
    episode_id: str,
    task: str | None,
    group: str | None,
    err: Console,
) -> int:
    """Run the child for one episode; returns its exit code (negative: the signal)."""
    if gateway is not None:
        gateway.book.start(episode_id, task_id=task, group_id=group)
    else:
        _post(f"{base}/e/{episode_id}/start", {"task_id": task, "group_id": group})
    env = dict(os.environ)
    env.update(
        OPENAI_BASE_URL=f"{base}/e/{episode_id}/v1",
        ANTHROPIC_BASE_URL=f"{base}/e/{episode_id}",
        AGENTTRACE_EPISODE_ID=episode_id,
    )
    if task is not None:
        env["AGENTTRACE_TASK_ID"] = task
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        err.print(f"agenttrace run: error: cannot run {command[0]}: {exc}")
        _end(base, gateway, episode_id, 127, f"could not start: {exc}")
        return EXIT_FAILURE
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        code = child.wait()
    reason = f"killed by signal {_signal_name(-code)}" if code < 0 else f"exit code {code}"
    _end(base, gateway, episode_id, code, reason)
    return code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _end(base: str, gateway: Any, episode_id: str, code: int, reason: str) -> None:
    if gateway is not None:
        gateway.book.end(episode_id, exit_code=code, reason=reason)
    else:
        _post(f"{base}/e/{episode_id}/end", {"exit_code": code, "reason": reason})


def _post(url: str, payload: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
