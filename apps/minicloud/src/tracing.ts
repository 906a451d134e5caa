/**
 * OpenTelemetry traces of the task flows a process runs (`serve`, `worker`): a span per flow run
 * and a child per task execution and revert (`@rigging/tasks`' `otelListener`), exported over
 * OTLP/HTTP (JSON) when the standard OpenTelemetry environment asks for it. Without
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) nothing of
 * OpenTelemetry is even loaded.
 */
import type { Logger } from '@rigging/core';
import { otelListener, type Engine } from '@rigging/tasks';

/** Flow tracing of one process; close it (or `await using`) after the cloud, to export every span. */
export interface FlowTracing extends AsyncDisposable {
  /** Emits spans for the flows `engine` runs from now on, until the tracing closes. */
  trace(engine: Engine): Promise<void>;
  /** Stops listening, exports the spans still buffered and shuts the provider down (idempotent). */
  close(): Promise<void>;
}

/** Whether the environment asks for traces: an OTLP endpoint is set and the SDK not disabled. */
function tracingRequested(): boolean {
  const env = process.env;
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/**
 * Starts a tracer provider exporting to `${OTEL_EXPORTER_OTLP_ENDPOINT}/v1/traces` in batches
 * (the exporter and the batch processor read the rest of the standard `OTEL_*` variables;
 * `service.name` is `minicloud` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` say
 * otherwise), or resolves with `undefined` when tracing is not requested. Export failures are
 * logged as warnings.
 */
export async function openTracing(logger: Logger): Promise<FlowTracing | undefined> {
  if (!tracingRequested()) return undefined;
  const [api, sdk, { OTLPTraceExporter }, resources] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
  ]);
  const log = logger.child({ component: 'opentelemetry' });
  api.diag.setLogger(
    {
      error: (message, ...args) => log.warn({ args }, message),
      warn: (message, ...args) => log.warn({ args }, message),
      info: () => undefined,
      debug: () => undefined,
      verbose: () => undefined,
    },
    api.DiagLogLevel.WARN,
  );
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': 'minicloud' }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const provider = new sdk.BasicTracerProvider({
    resource,
    spanProcessors: [new sdk.BatchSpanProcessor(new OTLPTraceExporter())],
  });
  const tracer = provider.getTracer('@rigging/tasks');
  const offs: (() => void)[] = [];
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      for (const off of offs.splice(0)) off();
      await provider.shutdown().catch((error: unknown) => {
        log.warn({ err: error }, 'minicloud: exporting the last spans failed');
      });
    })());
  return {
    async trace(engine) {
      offs.push(await otelListener(engine, { tracer }));
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
