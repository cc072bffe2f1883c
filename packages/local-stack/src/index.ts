export { startDynalite, type DynaliteOptions, type RunningDynalite } from './dynalite.js';
export { startKinesisLocal, type KinesisLocalOptions, type RunningKinesisLocal } from './kinesis-local.js';
export { postgresBinDir, startPostgresCluster, type PostgresCluster, type PostgresClusterOptions } from './postgres-cluster.js';
export { freePort } from './ports.js';
export { startRedisServer, type RedisServer, type RedisServerOptions } from './redis-server.js';
export { ensureTestServices, type TestServices } from './test-services.js';
export { openTestPool, postgresTarget, postgresUrl, redisTarget, redisUrl, START_POSTGRES, START_REDIS, type PostgresTarget } from './test-servers.js';
