// lifion-kinesis ships no types: the part the bench uses.
declare module 'lifion-kinesis' {
  import { EventEmitter } from 'node:events';
  export default class Kinesis extends EventEmitter {
    constructor(options: Record<string, unknown>);
    startConsumer(): Promise<void>;
    stopConsumer(): void;
  }
}
