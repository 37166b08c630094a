"""The test process's OpenTelemetry SDK: ONE meter provider with an in-memory reader and
ONE tracer provider with an in-memory exporter, set globally once (OpenTelemetry refuses
to replace a global provider), for every test module that reads metrics or spans."""

from __future__ import annotations

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

spans = InMemorySpanExporter()
_tracer_provider = TracerProvider()
_tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(_tracer_provider)


def _collected(name: str) -> list[Metric]:
    """Metric ``name`` as the reader collects it now (none until a point is recorded)."""
    data = reader.get_metrics_data()
    return [
        m
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
    ]


def points(name: str) -> list[object]:
    """Every data point of metric ``name`` collected so far."""
    return [p for m in _collected(name) for p in m.data.data_points]


def unit(name: str) -> str | None:
    """The unit metric ``name`` was made with (None: no point of it recorded yet)."""
    found = _collected(name)
    return found[0].unit if found else None
