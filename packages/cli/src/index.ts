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
export {
  startDashboard,
  checkDashboardOptions,
  type DashboardOptions,
  type RunningDashboard,
} from './dashboard/server.js';
export type { Snapshot, DashboardLease, DashboardMember, RetiredLease } from './dashboard/snapshot.js';
export type { TimelineEvent, TimelineKind } from './dashboard/timeline.js';
