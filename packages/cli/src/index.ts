export { run } from './program.js';
export { EXIT, type Io } from './shared.js';
export { parseStorageUrl, hidePassword, type StorageTarget, type PostgresTarget, type RedisTarget, type DynamoDBTarget } from './url.js';
export { Observer, observeLiveness, type Age, type Liveness, type LivenessOptions, type Versioned } from './observe.js';
