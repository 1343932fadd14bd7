import { LockClient, MemoryLockService } from '@dlock/core';
import { FakeClock, FaultyLockService } from '@dlock/testing';
import type { Attributes } from '@opentelemetry/api';
import {
  type DataPoint,
  type Histogram,
  MeterProvider,
  type MetricData,
  MetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { type InstrumentOptions, instrument } from '../src/index.js';

/** Collects when asked: no export timer, so a test decides when metrics are read. */
class OnDemandReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/**
 * A client on a FakeClock over a fault-switchable in-memory service, instrumented with the real SDK: metrics read on
 * demand, spans kept in memory.
 */
export function setup(options: Omit<InstrumentOptions, 'meterProvider' | 'tracerProvider' | 'clock'> = {}) {
  const clock = new FakeClock({ seed: 3 });
  const memory = new MemoryLockService({ clock });
  const faulty = new FaultyLockService(memory, { clock });
  const client = new LockClient(faulty, { clock, operationTimeoutMs: 1_000 });
  /** Another owner on the same service. */
  const other = new LockClient(memory, { clock });
  const reader = new OnDemandReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const uninstrument = instrument(client, { meterProvider, tracerProvider, clock, ...options });

  async function metrics(): Promise<Map<string, MetricData>> {
    const { resourceMetrics, errors } = await reader.collect();
    if (errors.length > 0) throw errors[0];
    const byName = new Map<string, MetricData>();
    for (const scope of resourceMetrics.scopeMetrics) {
      for (const metric of scope.metrics) byName.set(metric.descriptor.name, metric);
    }
    return byName;
  }

  /** The data points of one metric as [attributes, value] pairs; none when the metric was never recorded. */
  async function points<V = number>(name: string): Promise<{ attributes: Attributes; value: V }[]> {
    const metric = (await metrics()).get(name);
    if (!metric) return [];
    return (metric.dataPoints as DataPoint<unknown>[]).map((p) => ({
      attributes: p.attributes,
      value: p.value as V,
    }));
  }

  const histogram = (name: string) => points<Histogram>(name);

  const spans = (name?: string): ReadableSpan[] =>
    exporter.getFinishedSpans().filter((s) => name === undefined || s.name === name);

  return {
    clock,
    memory,
    faulty,
    client,
    other,
    uninstrument,
    metrics,
    points,
    histogram,
    spans,
    exporter,
    meterProvider,
    tracerProvider,
  };
}

/** Milliseconds of an OpenTelemetry HrTime. */
export function ms(time: readonly [number, number]): number {
  return time[0] * 1_000 + time[1] / 1e6;
}

/** Settles a promise's outcome without letting a rejection go unhandled. */
export function outcome<T>(promise: Promise<T>): { value?: T; error?: unknown; done: boolean } {
  const state: { value?: T; error?: unknown; done: boolean } = { done: false };
  promise.then(
    (value) => {
      state.value = value;
      state.done = true;
    },
    (error: unknown) => {
      state.error = error;
      state.done = true;
    },
  );
  return state;
}

/**
 * An event source that is not core's `LockClient`: `instrument()` accepts anything with `events.on`, so these tests
 * hand its listeners (kept by type in `listeners`) events core never sends.
 */
export function fakeEventStream() {
  const listeners = new Map<string, (event: unknown) => void>();
  const stream = {
    events: {
      on: (type: string, listener: (event: unknown) => void) => {
        listeners.set(type, listener);
        return () => listeners.delete(type);
      },
    },
  };
  return { listeners, stream };
}
