#!/usr/bin/env bash
# Run the inline agent traced by configuration only: ./run.sh [--episodes N] [--db FILE] ...
# TARGETS=agenttrace-record.toml ./run.sh also reads each step from the runner's record call.
# Spans and trajectories go to $AGENTTRACE_OUT (default ./agenttrace_runs).
set -euo pipefail
cd "$(dirname "$0")"
export AGENTTRACE_TARGETS_FILE="$PWD/${TARGETS:-agenttrace.toml}"
export OTEL_SERVICE_NAME=inline-agent
export OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none
exec opentelemetry-instrument "${PYTHON:-python}" launch.py "$@"
