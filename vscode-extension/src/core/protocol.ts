// The shapes of hpcdap's custom DAP requests and events (README "DAP interface"), shared by the
// extension's views and the DAP-level tests.

/** The state of one rank, as hpcdap/ranks and hpcdap/ranksChanged report it. */
export interface RankState {
  rank: number;
  state: 'starting' | 'running' | 'stopped' | 'exited';
  pid: number;
  host: string;
  /** The DAP id of the rank's main thread. */
  threadId: number;
  exitCode?: number;
  signal?: string;
  stopReason?: string;
}

/** The body of the hpcdap/ranks response. */
export interface RanksResponse {
  ranks: RankState[];
  /** The focus set, compressed. */
  focus: string;
}

/** The arguments of hpcdap/focus. */
export interface FocusArguments {
  ranks: string;
}

/** The body of the hpcdap/focus response. */
export interface FocusResponse {
  focus: string;
  count: number;
}

/** A source location as DAP's Source carries it. */
export interface StackSource {
  name?: string;
  path?: string;
}

/**
 * One node of the merged prefix tree of all ranks' stacks, outermost frame first. threadId and
 * frameLevel locate a representative frame: the frameLevel-th frame (0 = innermost) of that
 * thread's stackTrace.
 */
export interface StackNode {
  id: number;
  name: string;
  source?: StackSource;
  line?: number;
  ranks: string;
  count: number;
  threadId: number;
  frameLevel: number;
  children: StackNode[];
}

/** The arguments of hpcdap/parallelStacks. */
export interface ParallelStacksArguments {
  ranks?: string;
  maxFrames?: number;
  /** Merge a function's frames whatever line each rank is at. */
  byFunction?: boolean;
}

/** The body of the hpcdap/parallelStacks response. */
export interface ParallelStacksResponse {
  total: number;
  roots: StackNode[];
}

/** The arguments of hpcdap/compareExpression. */
export interface CompareExpressionArguments {
  expression: string;
  frameLevel?: number;
  ranks?: string;
}

/** One value of an expression and the ranks where it has that value. */
export interface CompareGroup {
  value: string;
  ranks: string;
  count: number;
}

/** The ranks where an expression could not be evaluated, and why. */
export interface CompareError {
  message: string;
  ranks: string;
}

/** The body of the hpcdap/compareExpression response. */
export interface CompareExpressionResponse {
  groups: CompareGroup[];
  errors: CompareError[];
}

/** The body of the hpcdap/ranksChanged event: only the ranks that changed. */
export interface RanksChangedEvent {
  ranks: RankState[];
}

/** Names of the custom requests and events. */
export const Requests = {
  ranks: 'hpcdap/ranks',
  focus: 'hpcdap/focus',
  parallelStacks: 'hpcdap/parallelStacks',
  compareExpression: 'hpcdap/compareExpression',
} as const;

/** Names of the custom events. */
export const Events = {
  ranksChanged: 'hpcdap/ranksChanged',
} as const;
