/**
 * Operation-specific rendering of step data, looked up by `operationCode` and
 * `data.schema`. Anything without a registered renderer falls back to the
 * generic card, which shows the lifecycle, phase and progress every step has —
 * so a client older than a new operation still shows an honest status (design P21).
 */

import type { UnknownStepSink } from './telemetry.js';
import type { StepDetail } from './types.js';

export interface RenderedField {
  label: string;
  value: string;
}

export interface RenderedStep {
  /** Which renderer produced it: `generic` or the registered key. */
  renderer: string;
  title: string;
  fields: RenderedField[];
}

export type StepRenderer = (step: StepDetail) => RenderedStep;

export interface RendererKey {
  operationCode?: string;
  schema?: string;
}

function keyOf(key: RendererKey): string {
  return `${key.operationCode ?? '*'}|${key.schema ?? '*'}`;
}

/** Generic card: what is known for any step, whatever its operation. */
export function genericCard(step: StepDetail): RenderedStep {
  const fields: RenderedField[] = [{ label: 'status', value: step.lifecycleStatus }];
  if (step.health !== 'HEALTHY') fields.push({ label: 'health', value: step.health });
  if (step.businessStatus) fields.push({ label: 'business status', value: step.businessStatus });
  if (step.phaseLabel ?? step.phaseCode) fields.push({ label: 'phase', value: String(step.phaseLabel ?? step.phaseCode) });
  const progress = step.progress;
  if (progress) {
    if (progress.current !== null && progress.total !== null) {
      fields.push({ label: 'progress', value: `${progress.current} / ${progress.total}${progress.unit ? ` ${progress.unit}` : ''}` });
    } else if (progress.percent !== null) {
      fields.push({ label: 'progress', value: `${progress.percent}%` });
    }
  }
  if (step.error) fields.push({ label: 'error', value: `${step.error.code}${step.error.userMessage ? `: ${step.error.userMessage}` : ''}` });
  return { renderer: 'generic', title: step.displayName ?? step.operationCode, fields };
}

export interface RendererRegistryOptions {
  /**
   * Told once per distinct `operationCode` and `data.schema` that could only be shown as the
   * generic card: give it the client's telemetry (`client.telemetry`) and operators see which
   * operations and schemas pages meet without a renderer (design D12).
   */
  telemetry?: UnknownStepSink;
}

export class RendererRegistry {
  private readonly renderers = new Map<string, StepRenderer>();
  private readonly unknown = new Set<string>();

  constructor(private readonly options: RendererRegistryOptions = {}) {}

  /** Register a renderer for an operation, a data schema, or both (most specific wins). */
  register(key: RendererKey, renderer: StepRenderer): this {
    if (!key.operationCode && !key.schema) throw new Error('a renderer needs an operationCode or a schema');
    this.renderers.set(keyOf(key), renderer);
    return this;
  }

  /** The renderer for a step: (operation, schema) → schema → operation → generic card. */
  resolve(step: StepDetail): StepRenderer {
    const schema = step.data?.schema;
    const candidates = [
      schema ? keyOf({ operationCode: step.operationCode, schema }) : null,
      schema ? keyOf({ schema }) : null,
      keyOf({ operationCode: step.operationCode }),
    ];
    for (const candidate of candidates) {
      if (candidate === null) continue;
      const found = this.renderers.get(candidate);
      if (found) return found;
    }
    return genericCard;
  }

  /** Render a step; a renderer that throws on unexpected data falls back to the generic card. */
  render(step: StepDetail): RenderedStep {
    const renderer = this.resolve(step);
    if (renderer === genericCard) {
      this.noteUnknown(step);
      return genericCard(step);
    }
    try {
      return renderer(step);
    } catch {
      return genericCard(step);
    }
  }

  /** Each operation and schema shown only as the generic card, told once. */
  private noteUnknown(step: StepDetail): void {
    const sink = this.options.telemetry;
    if (!sink) return;
    const seen: [string, 'operation' | 'schema'][] = [[`operation:${step.operationCode}`, 'operation']];
    const schema = step.data?.schema;
    if (schema) seen.push([`schema:${schema}`, 'schema']);
    for (const [key, what] of seen) {
      if (this.unknown.has(key)) continue;
      this.unknown.add(key);
      sink.unknownStep(what);
    }
  }
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
}

/** Renderers for the example operations shipped with the project (document and video pipelines). */
export function exampleRenderers(registry = new RendererRegistry()): RendererRegistry {
  return registry
    .register({ schema: 'document.parse.progress.v1' }, (step) => {
      const value = record(step.data?.value);
      const card = genericCard(step);
      const pages = value.pageCount !== undefined ? `${String(value.page)} of ${String(value.pageCount)}` : String(value.page);
      return { renderer: 'document.parse.progress.v1', title: card.title, fields: [...card.fields, { label: 'page', value: pages }] };
    })
    .register({ schema: 'document.parse.completed.v1' }, (step) => {
      const value = record(step.data?.value);
      const card = genericCard(step);
      const fields = [...card.fields, { label: 'pages', value: String(value.pageCount) }];
      if (typeof value.language === 'string') fields.push({ label: 'language', value: value.language });
      return { renderer: 'document.parse.completed.v1', title: card.title, fields };
    })
    .register({ schema: 'video.transcode.progress.v1' }, (step) => {
      const value = record(step.data?.value);
      const card = genericCard(step);
      const fields = [...card.fields];
      for (const [label, v] of Object.entries(value)) {
        if (typeof v === 'string' || typeof v === 'number') fields.push({ label, value: String(v) });
      }
      return { renderer: 'video.transcode.progress.v1', title: card.title, fields };
    });
}
