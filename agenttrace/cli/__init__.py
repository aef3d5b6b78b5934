"""The ``agenttrace`` command line: ``agenttrace demo`` and ``agenttrace inspect``."""
