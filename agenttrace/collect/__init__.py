"""``agenttrace collect``: one service where the spans of a whole fleet meet and become
trajectories (docs/collect.md).

* :mod:`agenttrace.collect.span_log`: the durable log of what was received;
* :mod:`agenttrace.collect.collector`: receive, log, rebuild with the one streaming assembler,
  write with the sinks;
* :mod:`agenttrace.collect.receivers`: OTLP over HTTP (aiohttp) and gRPC (grpcio);
* :mod:`agenttrace.collect.service`: runs them together, with the service's metrics.
"""

from agenttrace.collect.collector import Collector, CollectSettings
from agenttrace.collect.service import CollectService

__all__ = ["CollectService", "CollectSettings", "Collector"]
