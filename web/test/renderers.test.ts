import { describe, expect, it } from 'vitest';

import { RendererRegistry, exampleRenderers, genericCard } from '../src/renderers.js';
import { ClientTelemetry } from '../src/telemetry.js';
import { step } from './fixtures.js';

describe('renderer registry (design P21)', () => {
  it('falls back to the generic card for an unknown operation and schema, still showing lifecycle', () => {
    const registry = exampleRenderers();
    const rendered = registry.render(
      step('x', { operationCode: 'SOMETHING.NEW', lifecycleStatus: 'FAILED', data: { schema: 'new.v9', value: { a: 1 } }, error: { category: 'BUSINESS', code: 'E1', retryable: false, userMessage: 'boom' } }),
    );
    expect(rendered.renderer).toBe('generic');
    expect(rendered.fields).toContainEqual({ label: 'status', value: 'FAILED' });
    expect(rendered.fields).toContainEqual({ label: 'error', value: 'E1: boom' });
  });

  it('picks the most specific renderer: operation+schema, then schema, then operation', () => {
    const registry = new RendererRegistry()
      .register({ operationCode: 'OP' }, () => ({ renderer: 'op', title: '', fields: [] }))
      .register({ schema: 's.v1' }, () => ({ renderer: 'schema', title: '', fields: [] }))
      .register({ operationCode: 'OP', schema: 's.v1' }, () => ({ renderer: 'both', title: '', fields: [] }));
    expect(registry.render(step('a', { operationCode: 'OP', data: { schema: 's.v1', value: {} } })).renderer).toBe('both');
    expect(registry.render(step('a', { operationCode: 'OTHER', data: { schema: 's.v1', value: {} } })).renderer).toBe('schema');
    expect(registry.render(step('a', { operationCode: 'OP', data: { schema: 's.v2', value: {} } })).renderer).toBe('op');
    expect(registry.render(step('a', { operationCode: 'OTHER' })).renderer).toBe('generic');
  });

  it('uses the generic card when a renderer throws on data it did not expect', () => {
    const registry = new RendererRegistry().register({ schema: 's.v1' }, () => {
      throw new Error('unexpected shape');
    });
    expect(registry.render(step('a', { data: { schema: 's.v1', value: 3 } }))).toEqual(genericCard(step('a', { data: { schema: 's.v1', value: 3 } })));
  });

  it("tells the page's telemetry each operation and schema it could only show generically, once", () => {
    const telemetry = new ClientTelemetry(() => 0);
    const registry = exampleRenderers(new RendererRegistry({ telemetry }));
    const unknown = step('x', { operationCode: 'SOMETHING.NEW', data: { schema: 'new.v9', value: {} } });
    registry.render(unknown);
    registry.render(unknown); // the same step again (every update re-renders it): told once
    registry.render(step('y', { operationCode: 'SOMETHING.NEW' }));
    registry.render(step('z', { operationCode: 'OTHER.NEW' }));
    registry.render(step('p', { operationCode: 'DOCUMENT.PARSE', data: { schema: 'document.parse.progress.v1', value: { page: 1 } } }));
    const counters = telemetry.take(null).counters;
    expect(counters.unknownOperations).toBe(2); // SOMETHING.NEW, OTHER.NEW; the parse step has its renderer
    expect(counters.unknownSchemas).toBe(1); // new.v9
  });

  it('renders the example document progress schema', () => {
    const rendered = exampleRenderers().render(step('parse', { data: { schema: 'document.parse.progress.v1', value: { page: 3, pageCount: 8 } } }));
    expect(rendered.renderer).toBe('document.parse.progress.v1');
    expect(rendered.fields).toContainEqual({ label: 'page', value: '3 of 8' });
  });
});
