#!/usr/bin/env bash
# Run the Interactor traced by configuration only: ./run.sh [--episodes N] [--db FILE] ...
# Spans and trajectories go to $AGENTTRACE_OUT (default ./agenttrace_runs).
set -euo pipefail
cd "$(dirname "$0")"
set -a
. ./tracing.env
set +a
export AGENTTRACE_TARGETS_FILE="$PWD/$AGENTTRACE_TARGETS_FILE"
exec opentelemetry-instrument "${PYTHON:-python}" -m interactor "$@"
