import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_SECRET_FILE_BYTES, readSecret } from '../src/internal/readSecret.js';

// How rdmajs-ps-server takes its shared secret: never kept in the environment, never from a
// file others can read, never shorter than mux's minimum.

const work = mkdtempSync(join(tmpdir(), 'ps-secret-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const NAME = 'RDMAJS_PS_SECRET';
const hexKey = 'a1'.repeat(32); // `openssl rand -hex 32`
const configError = (message: RegExp) =>
  expect.objectContaining({
    code: 'ERR_PS_SERVICE_CONFIG',
    message: expect.stringMatching(message),
  });

function file(name: string, text: string, mode: number): string {
  const p = join(work, name);
  writeFileSync(p, text);
  chmodSync(p, mode); // whatever the umask
  return p;
}

describe('readSecret', () => {
  it('env_secret_is_removed_from_the_environment_after_reading', () => {
    const env: Record<string, string | undefined> = { [NAME]: hexKey, OTHER: 'kept' };
    expect(readSecret({ env, name: NAME })).toBe(hexKey);
    expect(NAME in env).toBe(false);
    expect(env.OTHER).toBe('kept');
  });

  it('env_secret_is_removed_even_when_refused_or_when_a_file_is_used', () => {
    const short: Record<string, string | undefined> = { [NAME]: 'x'.repeat(31) };
    expect(() => readSecret({ env: short, name: NAME })).toThrow(
      configError(/at least 32 bytes, got 31/),
    );
    expect(NAME in short).toBe(false);
    const both: Record<string, string | undefined> = { [NAME]: 'y'.repeat(40) };
    const f = file('both', `${hexKey}\n`, 0o600);
    expect(readSecret({ file: f, env: both, name: NAME })).toBe(hexKey); // the file wins
    expect(NAME in both).toBe(false);
  });

  it('owner_only_key_file_is_read_verbatim_less_one_trailing_newline', () => {
    const b64 = Buffer.alloc(32, 7).toString('base64'); // 44 characters
    expect(readSecret({ file: file('hex', `${hexKey}\n`, 0o600), env: {}, name: NAME })).toBe(
      hexKey,
    );
    expect(readSecret({ file: file('b64', `${b64}\r\n`, 0o400), env: {}, name: NAME })).toBe(b64);
  });

  it.skipIf(process.platform === 'win32')('key_file_open_to_group_or_others_is_refused', () => {
    for (const mode of [0o640, 0o604, 0o620, 0o644, 0o660, 0o666]) {
      const f = file(`open-${mode.toString(8)}`, hexKey, mode);
      expect(() => readSecret({ file: f, env: {}, name: NAME })).toThrow(
        configError(new RegExp(`group or others \\(mode ${mode.toString(8)}\\)`)),
      );
    }
  });

  it('short_missing_empty_or_oversized_file_is_refused_typed', () => {
    const short = file('short', 'x'.repeat(31), 0o600);
    expect(() => readSecret({ file: short, env: {}, name: NAME })).toThrow(
      configError(/at least 32/),
    );
    const empty = file('empty', '\n', 0o600);
    expect(() => readSecret({ file: empty, env: {}, name: NAME })).toThrow(
      configError(/no secret/),
    );
    const big = file('big', 'k'.repeat(MAX_SECRET_FILE_BYTES + 1), 0o600);
    expect(() => readSecret({ file: big, env: {}, name: NAME })).toThrow(
      configError(/larger than/),
    );
    expect(() => readSecret({ file: join(work, 'absent'), env: {}, name: NAME })).toThrow(
      configError(/secret file .*absent/),
    );
    expect(() => readSecret({ env: {}, name: NAME })).toThrow(configError(/no secret/));
  });
});
