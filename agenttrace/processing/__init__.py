"""Span processing: the trajectory processor, lossless span export, and the export content
policy (:class:`ContentPolicyExporter`, docs/export-content.md) for any SpanExporter."""

from agenttrace.processing.span_content import ContentPolicyExporter

__all__ = ["ContentPolicyExporter"]
