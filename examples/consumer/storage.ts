/**
 * The backend chosen by environment, so that processing code never changes between environments:
 * memory in unit tests, Postgres on a laptop, Redis or DynamoDB in production.
 *
 *   LEASEHOLD_STORAGE=memory                                   (default)
 *   LEASEHOLD_STORAGE=postgres  DATABASE_URL=postgres://...    [POSTGRES_SCHEMA=leasehold]
 *   LEASEHOLD_STORAGE=redis     REDIS_URL=redis://...          [REDIS_KEY_PREFIX=leasehold:]
 *   LEASEHOLD_STORAGE=dynamodb  DYNAMODB_TABLE=leasehold       [AWS_REGION, DYNAMODB_ENDPOINT]
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { InvalidConfigError, MemoryStorage, type Storage } from '@leasehold/core';
import { DynamoDBStorage } from '@leasehold/storage-dynamodb';
import { PostgresStorage } from '@leasehold/storage-postgres';
import { RedisStorage } from '@leasehold/storage-redis';
import { Redis } from 'ioredis';
import pg from 'pg';

/** A storage ready to use, and how to close the clients behind it. */
export interface OpenedStorage {
  storage: Storage;
  close(): Promise<void>;
}

function required(env: NodeJS.ProcessEnv, name: string): string {
  const value = env[name];
  if (!value) throw new InvalidConfigError(`[examples] ${name} must be set when LEASEHOLD_STORAGE=${env.LEASEHOLD_STORAGE}`);
  return value;
}

/** Opens the storage that `env` names, creating its tables on first use. */
export async function storageFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<OpenedStorage> {
  switch (env.LEASEHOLD_STORAGE ?? 'memory') {
    case 'memory':
      return { storage: new MemoryStorage(), close: async () => undefined };
    case 'postgres': {
      const pool = new pg.Pool({ connectionString: required(env, 'DATABASE_URL') });
      const storage = new PostgresStorage({ pool, schema: env.POSTGRES_SCHEMA ?? 'leasehold' });
      await storage.migrate(); // idempotent; safe when many workers start at once
      return {
        storage,
        close: async () => {
          await storage.close();
          await pool.end();
        },
      };
    }
    case 'redis': {
      const client = new Redis(required(env, 'REDIS_URL'));
      const storage = new RedisStorage({ client, keyPrefix: env.REDIS_KEY_PREFIX ?? 'leasehold:' });
      return {
        storage,
        close: async () => {
          await storage.close();
          client.disconnect();
        },
      };
    }
    case 'dynamodb': {
      const endpoint = env.DYNAMODB_ENDPOINT;
      const client = new DynamoDBClient({ region: env.AWS_REGION ?? 'us-east-1', ...(endpoint ? { endpoint } : {}) });
      const storage = new DynamoDBStorage({ client, tableName: required(env, 'DYNAMODB_TABLE') });
      await storage.createTable(); // on-demand billing; harmless when the table exists
      return { storage, close: async () => client.destroy() };
    }
    default:
      throw new InvalidConfigError(`[examples] LEASEHOLD_STORAGE must be memory, postgres, redis or dynamodb, got "${env.LEASEHOLD_STORAGE}"`);
  }
}
