import { runPostgresConformance } from './conformance-suite.js';

runPostgresConformance(false);
