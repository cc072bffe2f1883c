export { run } from './program.js';
export { EXIT, type Io } from './shared.js';
export {
  Observer,
  watchRoster,
  memberLiveness,
  ownerLiveness,
  type Age,
  type MemberLiveness,
  type OwnerLiveness,
  type RosterVerdict,
  type WatchOptions,
  type Versioned,
} from './observe.js';
