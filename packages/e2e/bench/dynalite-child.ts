/**
 * Runs dynalite in a process of its own for the scale benchmark, so that the emulator's CPU and event
 * loop are not counted as the workers'. Prints its endpoint as one JSON line, and stops when stdin ends.
 */
import { startDynalite } from '@leasehold/local-stack';

const dynalite = await startDynalite();
process.stdout.write(`${JSON.stringify({ endpoint: dynalite.endpoint })}\n`);
process.stdin.resume();
process.stdin.on('end', () => void dynalite.close().finally(() => process.exit(0)));
