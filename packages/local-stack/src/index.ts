export { startDynalite, type DynaliteOptions, type RunningDynalite } from './dynalite.js';
