import { runConformanceSuite } from '@leasehold/core/testing';
import { beforeAll, describe, it } from 'vitest';
import { PostgresStorage } from '../src/index.js';
import { useServer } from './support.js';

// One pool for the file, a new storage per client: the suite races up to 32 clients, which queue on the
// pool's 10 connections instead of opening 32 of their own.
const server = useServer('lh_conformance', 10);

beforeAll(async () => {
  await new PostgresStorage({ pool: server.pool(), schema: server.schema }).migrate();
});

for (const preparedStatements of [true, false]) {
  runConformanceSuite(
    { describe, it },
    {
      name: preparedStatements ? 'PostgresStorage' : 'PostgresStorage without prepared statements',
      createStorage: async () => new PostgresStorage({ pool: server.pool(), schema: server.schema, preparedStatements }),
      closeStorage: async (storage) => (storage as PostgresStorage).close(),
      changeFeed: true,
    },
  );
}
