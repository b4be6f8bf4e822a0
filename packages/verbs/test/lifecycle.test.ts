import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { allocCompletions, type Endpoint, openDevice, type WorkCompletion } from '../src/index.js';
import { ALL, collect, providers, side, sleep, until } from './harness/pair.js';

const code = (c: string) => expect.objectContaining({ code: c });

describe.each(providers)('lifecycle on %s', (provider) => {
  it('closing a parent closes its live children first; close is idempotent', () => {
    const dev = openDevice({ provider });
    const pd = dev.allocPd();
    const cq = dev.createCq();
    const mr = pd.allocMr(4096, ALL);
    const srq = pd.createSrq();
    const qp = pd.createQp({ sendCq: cq, recvCq: cq });
    const qp2 = pd.createQp({ sendCq: cq, recvCq: cq, srq });
    pd.close();
    expect([qp.closed, qp2.closed, srq.closed, mr.closed, pd.closed, cq.closed]).toEqual([
      true,
      true,
      true,
      true,
      true,
      false,
    ]);
    dev.close();
    dev.close();
    expect(cq.closed).toBe(true);
  });

  it('deregistering allocMr memory releases it at once: earlier views become detached', () => {
    const s = side(provider);
    const mr = s.pd.allocMr(1 << 16, ALL);
    const view = mr.bytes;
    const sub = view.subarray(100, 200);
    view[0] = 1;
    mr.deregister();
    expect(view.byteLength).toBe(0);
    expect(sub.byteLength).toBe(0);
    expect(view[0]).toBeUndefined();
    s.dev.close();
  });

  it('a CQ in use by a QP cannot be closed (ERR_RDMA_BUSY), then can once the QP is gone', () => {
    const s = side(provider);
    expect(() => s.cq.close()).toThrow(code('ERR_RDMA_BUSY'));
    s.qp.close();
    s.cq.close();
    expect(s.cq.closed).toBe(true);
    s.dev.close();
  });

  it('every call after close throws ERR_RDMA_CLOSED instead of crashing', () => {
    const s = side(provider);
    const sge = s.mr.sge(0, 8);
    s.dev.close();
    expect(() => s.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [sge] })).toThrow(
      code('ERR_RDMA_CLOSED'),
    );
    expect(() => s.qp.postRecv({ wrId: 1, sgList: [sge] })).toThrow(code('ERR_RDMA_CLOSED'));
    expect(() => s.qp.state).toThrow(code('ERR_RDMA_CLOSED'));
    expect(() => s.cq.poll([])).toThrow(code('ERR_RDMA_CLOSED'));
    expect(() => s.pd.allocMr(64, 1)).toThrow(code('ERR_RDMA_CLOSED'));
    expect(() => s.dev.createCq()).toThrow(code('ERR_RDMA_CLOSED'));
    expect(() => s.mr.bytes).toThrow(code('ERR_RDMA_MR_INVALID'));
  });

  it('a peer whose QP was destroyed is unreachable: RETRY_EXC_ERR', async () => {
    const a = side(provider);
    const b = side(provider);
    a.qp.connect(b.qp.endpoint(), { timeout: 8, retryCount: 1 });
    b.qp.connect(a.qp.endpoint());
    b.dev.close();
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    expect((await collect(a.cq, 1))[0]?.status).toBe('RETRY_EXC_ERR');
    a.dev.close();
  });

  it('supports `using` (Symbol.dispose)', () => {
    let seen: { closed: boolean } | undefined;
    {
      using dev = openDevice({ provider });
      seen = dev;
    }
    expect(seen?.closed).toBe(true);
  });

  it('works in worker threads, and a worker exiting with an open device cleans it up', async () => {
    const main = side(provider);
    const worker = new Worker(
      fileURLToPath(new URL('./fixtures/worker-boot.mjs', import.meta.url)),
      {
        workerData: { provider },
      },
    );
    const next = () =>
      new Promise<Record<string, unknown>>((resolve) => worker.once('message', resolve));
    const { endpoint } = (await next()) as { endpoint: Endpoint };
    main.qp.connect(endpoint);
    main.qp.postRecv({ wrId: 9, sgList: [main.mr.sge(0, 64)] });
    worker.postMessage({ endpoint: main.qp.endpoint() });
    await next();
    main.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [main.mr.sge(0, 12)] });
    await next();
    const wcs = await collect(main.cq, 2);
    expect(wcs.find((w) => w.wrId === 9)).toMatchObject({ status: 'SUCCESS', byteLen: 12 });
    expect(await worker.terminate()).toBeDefined();
    main.dev.close();
  });

  it('a worker terminated while a peer keeps sending into it takes nothing down', async () => {
    // Regression: at worker exit Node collects registered buffers before the device's cleanup
    // hook runs, and the main thread used to copy into those unmapped pages (SIGSEGV), or the
    // worker's completion handler was called during termination (fatal napi_throw).
    const boot = fileURLToPath(new URL('./fixtures/worker-boot.mjs', import.meta.url));
    const seen = new Set<string>();
    for (let round = 0; round < 6; round++) {
      const main = side(provider, { cqCapacity: 4096, maxSendWr: 1024 });
      const worker = new Worker(boot, { workerData: { provider, module: './worker-flood.ts' } });
      const next = () => new Promise<{ endpoint: Endpoint }>((r) => worker.once('message', r));
      const { endpoint } = await next();
      main.qp.connect(endpoint, { rnrRetry: 7, timeout: 8, retryCount: 1 });
      worker.postMessage({ endpoint: main.qp.endpoint() });
      await next();
      const wcs = allocCompletions(64);
      let failed = false;
      let stop = false;
      const pump = () => {
        if (stop) return;
        const n = main.cq.poll(wcs);
        for (let i = 0; i < n; i++) {
          const status = (wcs[i] as WorkCompletion).status;
          seen.add(status);
          if (status !== 'SUCCESS') failed = true;
        }
        for (let i = 0; i < 16 && !failed; i++) {
          if (main.qp.state !== 'rts') break;
          try {
            main.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [main.mr.sge(0, 8)] });
          } catch (e) {
            if ((e as { code?: string }).code !== 'ERR_RDMA_QUEUE_FULL') throw e;
            break;
          }
        }
        setImmediate(pump);
      };
      pump();
      await sleep(5 + round * 5);
      await worker.terminate();
      await until(() => failed, 'the sender to see its peer gone', 10_000);
      stop = true;
      main.dev.close();
    }
    for (const status of seen)
      expect(['SUCCESS', 'RETRY_EXC_ERR', 'WR_FLUSH_ERR']).toContain(status);
    expect(seen).toContain('RETRY_EXC_ERR');
  }, 120_000); // each round boots a worker: seconds under emulation (the rxe VM)

  it('closed and dropped objects are garbage-collected', () => {
    const script = fileURLToPath(new URL('./fixtures/gc-check.ts', import.meta.url));
    const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', script], {
      env: { ...process.env, PROVIDER: provider },
      encoding: 'utf8',
      timeout: 30_000,
    });
    const collected = JSON.parse(out) as string[];
    for (const tag of ['closed', 'open']) {
      for (const what of ['device', 'qp', 'mr', 'bytes', 'cq'])
        expect(collected).toContain(`${tag}:${what}`);
    }
  });
});
