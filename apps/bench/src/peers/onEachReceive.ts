import type { CompletionQueue, WorkCompletion } from '@rdmajs/verbs';

export interface EachReceive {
  cq: CompletionQueue;
  /** Where polls land (reused). */
  wcs: WorkCompletion[];
  /** Called for each RECV completion, in order; true ends the run. */
  onReceive: () => boolean;
  /** How far the run got, for the timeout's error (e.g. "12 of 5000 round trips"). */
  progress: () => string;
  /** Runs once the event is armed (e.g. the first SEND of the side that starts). */
  start?: () => void;
  timeoutMs?: number;
}

/**
 * A verbs ping-pong side driven by the CQ's 'completion' event: poll, handle each receive,
 * re-arm with requestNotify — callbacks, as a node:net peer answers from 'data', with no
 * promise per wait. Resolves when `onReceive` says done. Ends either way with its timer
 * cleared and its listener off: a throw (inside the handler too, where it would otherwise
 * escape from the CQ's emit) or the timeout rejects.
 */
export function onEachReceive(o: EachReceive): Promise<void> {
  const { cq, wcs } = o;
  const timeoutMs = o.timeoutMs ?? 120_000;
  return new Promise((resolve, reject) => {
    const stop = (err?: Error) => {
      clearTimeout(timer);
      cq.off('completion', onCompletion);
      if (err === undefined) resolve();
      else reject(err);
    };
    const timer = setTimeout(
      () => stop(new Error(`${o.progress()} in ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
    const onCompletion = () => {
      try {
        const n = cq.poll(wcs);
        for (let i = 0; i < n; i++) {
          if (wcs[i]?.opcode !== 'RECV') continue;
          if (o.onReceive()) return stop();
        }
        cq.requestNotify();
      } catch (err) {
        stop(err as Error);
      }
    };
    cq.on('completion', onCompletion);
    try {
      cq.requestNotify();
      o.start?.();
    } catch (err) {
      stop(err as Error);
    }
  });
}
