// The benches' two-process set-up: this very script again as the region's owner (argv
// 'server'), which prints its listening port on its first stdout line.
import { type ChildProcess, spawn } from 'node:child_process';

export async function spawnServer(script: string): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', script, 'server'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: process.env,
  });
  const port = await new Promise<number>((r) =>
    child.stdout?.once('data', (d) => r(Number(String(d).trim()))),
  );
  return { child, port };
}
