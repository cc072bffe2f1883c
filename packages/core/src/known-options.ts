/**
 * Options objects refuse keys they do not name (DESIGN section 6, guarantee 8): a misplaced or misspelt
 * option (`leaseDurationMs` at the top of a Consumer's options instead of under `lease`) would otherwise
 * be ignored, and the component would run with a default the user meant to change.
 */
import { describeValue, InvalidConfigError } from './errors.js';

/**
 * The keys of an options type, every one of them: the compiler refuses a key the type does not have and
 * a key of the type that is missing, so a list never falls behind its type.
 */
export function optionKeys<T extends object>(keys: { readonly [K in keyof Required<T>]: true }): readonly string[] {
  return Object.keys(keys);
}

/** Where a key that is not an option of an object belongs instead: `{ leaseDurationMs: 'lease.leaseDurationMs' }`. */
export type OptionHints = Readonly<Record<string, string>>;

/**
 * The hints of a nested options object's keys: each key of `nested[name]` belongs at `name.key`, unless
 * `known` (the outer object's own keys) names it too; the first object naming a key wins.
 */
export function nestedOptionHints(known: readonly string[], nested: Readonly<Record<string, readonly string[]>>): OptionHints {
  const hints: Record<string, string> = {};
  for (const [name, keys] of Object.entries(nested)) {
    for (const key of keys) if (!known.includes(key) && !Object.hasOwn(hints, key)) hints[key] = `${name}.${key}`;
  }
  return hints;
}

/**
 * Refuses an options object holding a key that `known` does not name, with an `InvalidConfigError` naming
 * the key and where it belongs (`hints`), or the key it differs from only in case, or else the keys
 * `what` takes. `path` prefixes a suggested key (`lease.` for a Consumer's `lease`).
 */
export function refuseUnknownOptions(pkg: string, what: string, options: object, known: readonly string[], hints: OptionHints = {}, path = ''): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const lower = key.toLowerCase();
    const sameButCase = known.find((name) => name.toLowerCase() === lower);
    const belongs = Object.hasOwn(hints, key) ? hints[key] : sameButCase === undefined ? undefined : `${path}${sameButCase}`;
    const advice = belongs === undefined ? `it takes ${known.join(', ')}` : `did you mean ${belongs}?`;
    throw new InvalidConfigError(`[${pkg}] ${what} has no option ${describeValue(key)}; ${advice}`);
  }
}
