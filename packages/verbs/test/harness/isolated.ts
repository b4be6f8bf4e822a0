// Runs a fixture in its own Node process, so a scenario that aborts (double free, uncaught
// C++ exception, SIGSEGV) fails the test with its signal and stderr instead of killing vitest.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface Isolated<T> {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  /** The fixture's last stdout line, parsed as JSON (undefined when it printed none). */
  result: T | undefined;
}

export function runIsolated<T = unknown>(
  fixture: string,
  args: string[] = [],
  timeoutMs = 60_000,
): Promise<Isolated<T>> {
  const script = fileURLToPath(new URL(`../fixtures/${fixture}`, import.meta.url));
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    proc.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${fixture} did not finish within ${timeoutMs} ms; stderr:\n${stderr}`));
    }, timeoutMs);
    proc.on('error', reject);
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      const last = stdout.trim().split('\n').pop();
      let result: T | undefined;
      try {
        result = last ? (JSON.parse(last) as T) : undefined;
      } catch {
        result = undefined;
      }
      resolve({ code, signal, stderr, result });
    });
  });
}
