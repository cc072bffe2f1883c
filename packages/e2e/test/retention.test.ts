import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));

// bench/retention.ts needs a collector it can call (`--expose-gc`), so it runs in a process of its own.
describe('a worker lets go of a batch it is done with', () => {
  it('leaves no record of a batch alive in the source read, the reader or the consumer while the next batch is awaited', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '--import', 'tsx', 'bench/retention.ts'], { cwd: PACKAGE_DIR });
    expect(stdout).toContain('source read, next batch awaited: handed records alive 0 of 3, SDK records alive 0 of 3');
    expect(stdout).toContain('source read, next batch awaited after an empty one: handed records alive 0 of 3, SDK records alive 0 of 3');
    expect(stdout).toContain('consumer, handler resolved, next batch awaited: handed records alive 0 of 3');
  }, 60_000);
});
