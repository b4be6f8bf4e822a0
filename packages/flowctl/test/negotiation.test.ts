import { describe, expect, it } from 'vitest';
import {
  defaultFlowParams,
  FLOW_PARAMS_VERSION,
  negotiateFlow,
  parseFlowParams,
  ReceiveCredits,
  SendCredits,
  SendWindow,
} from '../src/index.js';
import { expectCode } from './helpers.js';

describe('negotiation values', () => {
  it('are plain values that survive a JSON round trip', () => {
    const p = defaultFlowParams({ receiveCredits: 16, returnThreshold: 8 });
    expect(p.version).toBe(FLOW_PARAMS_VERSION);
    expect(parseFlowParams(JSON.parse(JSON.stringify(p)))).toEqual(p);
  });

  it('combine symmetrically: my send credits are the peer’s posted buffers', () => {
    const client = defaultFlowParams({
      receiveCredits: 16,
      returnThreshold: 4,
      windowBytes: 1 << 20,
    });
    const server = defaultFlowParams({
      receiveCredits: 64,
      returnThreshold: 32,
      windowMessages: 32,
      maxMessageBytes: 4096,
    });
    const atClient = negotiateFlow(client, server);
    const atServer = negotiateFlow(server, client);
    expect(atClient.send).toEqual({ initialCredits: 64, reservedCredits: 1 });
    expect(atClient.receive).toEqual({
      initialCredits: 16,
      reservedCredits: 1,
      returnThreshold: 4,
    });
    expect(atServer.send.initialCredits).toBe(atClient.receive.initialCredits);
    expect(atServer.receive.initialCredits).toBe(atClient.send.initialCredits);
    expect(atClient.window).toEqual({ maxBytes: 1 << 20, maxMessages: 32 });
    expect(atServer.window).toEqual(atClient.window);
    expect(atClient.maxMessageBytes).toBe(4096);
    expect(atServer.maxMessageBytes).toBe(8192);
  });

  it('feed the constructors directly', () => {
    const agreed = negotiateFlow(defaultFlowParams(), defaultFlowParams());
    const send = new SendCredits({ ...agreed.send });
    const receive = new ReceiveCredits({ ...agreed.receive });
    const window = new SendWindow({ ...agreed.window });
    expect(send.available).toBe(64);
    expect(receive.params()).toEqual(agreed.receive);
    expect(window.maxMessageBytes).toBe(agreed.window.maxBytes);
  });

  it('speak the oldest common version with a newer peer', () => {
    const newer = { ...defaultFlowParams(), version: FLOW_PARAMS_VERSION + 1, extra: 'ignored' };
    expect(negotiateFlow(defaultFlowParams(), newer).version).toBe(FLOW_PARAMS_VERSION);
  });

  it('reject malformed or unsafe values from a peer with ERR_FLOWCTL_INVALID_ARG', () => {
    const good = defaultFlowParams();
    expectCode(() => parseFlowParams(null), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, version: 0 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, receiveCredits: 2 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, reservedCredits: 0 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, returnThreshold: 1 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, returnThreshold: 64 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, windowBytes: '4096' }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => parseFlowParams({ ...good, windowMessages: 1.5 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(
      () => negotiateFlow(good, { ...good, maxMessageBytes: -1 }),
      'ERR_FLOWCTL_INVALID_ARG',
    );
  });
});
