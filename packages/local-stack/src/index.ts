export { startDynalite, type DynaliteOptions, type RunningDynalite } from './dynalite.js';
export { startKinesisLocal, type KinesisLocalOptions, type RunningKinesisLocal } from './kinesis-local.js';
