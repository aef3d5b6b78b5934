"""The LLM capture gateway: any agent, in any language, recorded from the model API calls it
makes (docs/gateway.md).

* :mod:`agenttrace.gateway.routes`: which episode and API a call is, from URL and headers;
* :mod:`agenttrace.gateway.streams`: a streamed answer put back together;
* :mod:`agenttrace.gateway.recorder`: calls as agenttrace spans (episodes, steps, tool calls);
* :mod:`agenttrace.gateway.proxy`: forwarding to the upstream, recording on the way;
* :mod:`agenttrace.gateway.service`: the gateway as a server.
"""

from agenttrace.gateway.proxy import GatewaySettings
from agenttrace.gateway.service import Gateway

__all__ = ["Gateway", "GatewaySettings"]
