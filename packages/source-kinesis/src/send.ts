/**
 * Sending a request that a signal cancels without defeating the client's middleware cache.
 *
 * The SDK's `Client.send` resolves the middleware stack of the command again on every send that carries
 * options, and a client built with `cacheMiddleware: true` (which resolves it once per command class)
 * also drops its whole cache on such a send, for every caller of the client. With such a client the
 * signal is therefore not given to the SDK: the answer is raced against it. The request is left to end
 * on its own (a GetRecords or a listing answers at once) and its answer is dropped. Any other client
 * resolves its stack on every send anyway, so it gets the signal, which also closes the HTTP request.
 */
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { abortReason } from '@leasehold/core/adapter';

/** The per-call options a send is given: the signal, or none for a client that caches its middleware. */
export type SendOptions = { readonly abortSignal: AbortSignal } | undefined;

/**
 * Whether the client resolves its middleware stack once per command class (`cacheMiddleware: true`). An
 * object that only has `send`, as a wrapper or a fake may be, does not.
 */
export function cachesMiddleware(client: KinesisClient): boolean {
  return (client as { readonly config?: { readonly cacheMiddleware?: boolean } }).config?.cacheMiddleware === true;
}

/**
 * The answer of `send`, rejected with the signal's reason once `signal` fires. `send` makes the request
 * with the options it is given, as `client.send(command, options)`.
 */
export function sendCancellable<T>(client: KinesisClient, signal: AbortSignal, send: (options: SendOptions) => Promise<T>): Promise<T> {
  if (!cachesMiddleware(client)) return send({ abortSignal: signal });
  if (signal.aborted) return Promise.reject(abortReason(signal));
  const request = send(undefined);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortReason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    request.then(
      (output) => {
        signal.removeEventListener('abort', onAbort);
        resolve(output);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        // The SDK's own failure, passed on as it came, as a send without the race would.
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
        reject(error);
      },
    );
  });
}
