import { describe, expect, it } from 'vitest';
import { unlessAborted } from '../src/clock.js';
import { AbortedError } from '../src/errors.js';

describe('a read given up when its signal fires', () => {
  it('answers with the read when it answers first, and fails with its failure when it fails first', async () => {
    const controller = new AbortController();
    await expect(unlessAborted(Promise.resolve('listing'), controller.signal)).resolves.toBe('listing');
    await expect(unlessAborted(Promise.reject(new Error('store down')), controller.signal)).rejects.toThrow('store down');
    controller.abort();
  });

  it('fails with the signal\'s reason as soon as the signal fires first, the read left to finish unawaited', async () => {
    const controller = new AbortController();
    let fail = (): void => undefined;
    const read = new Promise<string>((_resolve, reject) => (fail = () => reject(new Error('late failure'))));
    const given = unlessAborted(read, controller.signal);
    controller.abort(new AbortedError('stopping'));
    await expect(given).rejects.toThrow('stopping');
    // Its later failure is nobody's: no unhandled rejection.
    fail();
    await new Promise((resolve) => setTimeout(resolve, 10));
  });

  it('fails at once for a signal that already fired', async () => {
    const controller = new AbortController();
    controller.abort();
    await expect(unlessAborted(new Promise(() => undefined), controller.signal)).rejects.toBeInstanceOf(AbortedError);
  });
});
