export * from './errors.js';
export * from './storage.js';
export * from './source.js';
export * from './limits.js';
export * from './clock.js';
export { compareNumericPositions } from './position.js';
export { MemoryStorage, type MemoryStorageOptions } from './memory/memory-storage.js';
