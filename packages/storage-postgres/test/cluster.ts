/** The throwaway PostgreSQL cluster of the destructive tests: never the shared server. */
export { startPostgresCluster as startCluster, type PostgresCluster as Cluster } from '@leasehold/local-stack';
