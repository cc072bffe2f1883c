export { RedisStorage, type RedisStorageOptions } from './redis-storage.js';
