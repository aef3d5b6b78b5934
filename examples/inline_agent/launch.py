"""The job launcher: puts the agent's source tree on sys.path at run time, then runs it.

Launchers of real training jobs do this (a job unpacks its code and adds it, a plugin loader
finds a source folder), so the agent's modules cannot be imported when
``opentelemetry-instrument`` starts agenttrace, before this file runs. agenttrace resolves
targets in such modules when they are first imported.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from inline_agent.__main__ import main

main()
