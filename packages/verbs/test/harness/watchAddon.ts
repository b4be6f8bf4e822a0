// Devices opened while a watch is on count their addon calls and show each one to a hook:
// what the library calls is what a test checks. The addon's methods are read-only on its
// objects, so `new` on the watched class gives a proxy that hands out counting methods,
// each calling the addon's own on the real object.
import { loadAddon } from '../../src/internal/native.js';

type AnyFn = (...a: unknown[]) => unknown;

/** One addon call: `before` runs ahead of it (inputs the call consumes), `after` with its result. */
export interface CallHook {
  before?(name: string, args: unknown[]): unknown;
  after?(name: string, args: unknown[], result: unknown, seen: unknown, target: object): void;
}

export interface AddonWatch {
  calls: Map<string, number>;
  restore(): void;
}

export function watchAddon(hook: CallHook = {}): AddonWatch {
  const addon = loadAddon() as unknown as { SoftDevice: new (...a: unknown[]) => object };
  const Original = addon.SoftDevice;
  const calls = new Map<string, number>();
  function Watched(...args: unknown[]): object {
    const target = new Original(...args) as Record<string, unknown>;
    const cache = new Map<string | symbol, AnyFn>();
    return new Proxy(
      {},
      {
        get(_, k) {
          const f = target[k as string];
          if (typeof f !== 'function') return f;
          let w = cache.get(k);
          if (w === undefined) {
            const name = String(k);
            w = (...a: unknown[]) => {
              calls.set(name, (calls.get(name) ?? 0) + 1);
              const seen = hook.before?.(name, a);
              const r = (f as AnyFn).apply(target, a);
              hook.after?.(name, a, r, seen, target);
              return r;
            };
            cache.set(k, w);
          }
          return w;
        },
      },
    );
  }
  addon.SoftDevice = Watched as unknown as typeof Original;
  return {
    calls,
    restore: () => {
      addon.SoftDevice = Original;
    },
  };
}
