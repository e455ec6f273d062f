// Per-session state behind the views: the ranks, the focus and the merged stacks of each hpcdap
// debug session, kept current from the adapter's events (stopped, continued, terminated,
// hpcdap/ranksChanged) through a debug adapter tracker.

import * as vscode from 'vscode';
import {
  Events,
  FocusResponse,
  ParallelStacksResponse,
  RankState,
  RanksChangedEvent,
  RanksResponse,
  Requests,
} from './core/protocol';
import { RankModel } from './core/ranks';

/** What the views know of one hpcdap debug session. */
export class HpcSession {
  readonly ranks = new RankModel();
  /** The last merged stacks, if they were fetched since the ranks last stopped. */
  stacks?: ParallelStacksResponse;
  /** Why the last hpcdap/parallelStacks failed. */
  stacksError?: string;
  /** Why the last hpcdap/ranks failed. */
  ranksError?: string;
  /** Whether some rank runs, so that the stacks shown are not current. */
  stacksStale = true;
  /** Whether the session has ended. */
  ended = false;

  constructor(readonly session: vscode.DebugSession) {}

  /** The session's name for messages. */
  get name(): string {
    return this.session.name;
  }

  /** How many hpcdap/ranks answers the tracker has applied, in stream order. */
  ranksAnswers = 0;

  /**
   * Applies an hpcdap/ranks answer. The tracker calls this when the response passes, in order
   * with the events around it: the request's promise resolves only after a round trip through
   * the workbench, by when a later hpcdap/ranksChanged may already have been applied, and the
   * older answer must not overwrite it.
   */
  applyRanks(body: RanksResponse | undefined): void {
    this.ranks.reset(body?.ranks ?? [], body?.focus);
    this.ranksError = undefined;
    this.ranksAnswers++;
  }

  /** Fetches every rank's state and the focus. */
  async fetchRanks(): Promise<void> {
    const seen = this.ranksAnswers;
    try {
      const body = (await this.session.customRequest(Requests.ranks, {})) as RanksResponse;
      if (this.ranksAnswers === seen) {
        // No tracker saw the response (it should have): apply it here.
        this.applyRanks(body);
      }
    } catch (e) {
      this.ranksError = errorText(e);
    }
  }

  /**
   * Fetches the stacks of the stopped ranks merged by frame (function and line), from which the
   * Parallel Stacks view also merges them by function.
   */
  async fetchStacks(maxFrames: number): Promise<void> {
    try {
      this.stacks = (await this.session.customRequest(Requests.parallelStacks, { maxFrames })) as ParallelStacksResponse;
      this.stacksError = undefined;
      this.stacksStale = false;
    } catch (e) {
      this.stacks = undefined;
      this.stacksError = errorText(e);
    }
  }

  /** Sets the adapter's focus set and records the focus it reports back. */
  async setFocus(ranks: string): Promise<FocusResponse> {
    const body = (await this.session.customRequest(Requests.focus, { ranks })) as FocusResponse;
    this.ranks.focus = body.focus;
    return body;
  }
}

/** The hpcdap sessions, which of them the views show, and when their data changes. */
export class SessionManager implements vscode.Disposable {
  private readonly sessions = new Map<string, HpcSession>();
  private current?: HpcSession;
  private readonly changed = new vscode.EventEmitter<HpcSession | undefined>();
  private readonly pending = new Map<string, { ranks: boolean; stacks: boolean; timer?: NodeJS.Timeout; running?: Promise<void> }>();
  private readonly disposables: vscode.Disposable[] = [this.changed];
  /** Whether the Parallel Stacks view is visible: stacks are fetched only for a visible view. */
  stacksWanted = false;

  /** Fires when the shown session or its data changes. */
  readonly onDidChange = this.changed.event;

  constructor(private readonly log: vscode.LogOutputChannel) {
    this.disposables.push(
      vscode.debug.registerDebugAdapterTrackerFactory('hpcdap', {
        createDebugAdapterTracker: (session) => ({
          onDidSendMessage: (m: unknown) => this.onAdapterMessage(session, m as AdapterMessage),
          onWillReceiveMessage: (m: unknown) => this.onClientMessage(session, m as AdapterMessage),
          onError: (e: Error) => this.log.error(`${session.name}: adapter connection: ${e.message}`),
        }),
      }),
      vscode.debug.onDidStartDebugSession((s) => {
        if (s.type === 'hpcdap') {
          this.sessionFor(s);
          this.select(vscode.debug.activeDebugSession);
        }
      }),
      vscode.debug.onDidTerminateDebugSession((s) => this.ended(s)),
      vscode.debug.onDidChangeActiveDebugSession((s) => this.select(s)),
    );
  }

  /** The session the views show: the active hpcdap session, else the latest one still running. */
  get active(): HpcSession | undefined {
    return this.current;
  }

  /** Refreshes the ranks, and the stacks if the view wants them, of the shown session now. */
  async refresh(): Promise<void> {
    if (this.current) {
      this.schedule(this.current, true, true, 0);
      await this.pending.get(this.current.session.id)?.running;
    }
  }

  /** Records a focus that a command set, and redraws. */
  notify(s: HpcSession): void {
    if (s === this.current) {
      this.changed.fire(s);
    }
  }

  /** Asks for the stacks of the shown session when the Parallel Stacks view becomes visible. */
  setStacksWanted(wanted: boolean): void {
    this.stacksWanted = wanted;
    if (wanted && this.current && !this.current.ended && (this.current.stacksStale || !this.current.stacks)) {
      this.schedule(this.current, false, true, 0);
    }
  }

  private sessionFor(s: vscode.DebugSession): HpcSession {
    let h = this.sessions.get(s.id);
    if (!h) {
      h = new HpcSession(s);
      this.sessions.set(s.id, h);
    }
    return h;
  }

  private select(s: vscode.DebugSession | undefined): void {
    let next: HpcSession | undefined;
    if (s?.type === 'hpcdap') {
      next = this.sessionFor(s);
    } else if (!this.current || this.current.ended) {
      next = [...this.sessions.values()].reverse().find((h) => !h.ended);
    } else {
      next = this.current;
    }
    if (next !== this.current) {
      this.current = next;
      this.changed.fire(next);
    }
  }

  private ended(s: vscode.DebugSession): void {
    const h = this.sessions.get(s.id);
    if (!h) {
      return;
    }
    h.ended = true;
    const p = this.pending.get(s.id);
    if (p?.timer) {
      clearTimeout(p.timer);
    }
    this.pending.delete(s.id);
    this.sessions.delete(s.id);
    if (this.current === h) {
      this.current = [...this.sessions.values()].reverse().find((x) => !x.ended);
      this.changed.fire(this.current);
    }
  }

  /** A resume request from any client makes the stacks shown out of date. */
  private onClientMessage(session: vscode.DebugSession, m: AdapterMessage): void {
    if (m.type === 'request' && resumeCommands.has(m.command ?? '')) {
      const h = this.sessionFor(session);
      if (!h.stacksStale) {
        h.stacksStale = true;
        this.notify(h);
      }
    }
  }

  private onAdapterMessage(session: vscode.DebugSession, m: AdapterMessage): void {
    const h = this.sessionFor(session);
    if (m.type === 'response' && m.command === Requests.ranks && m.success) {
      h.applyRanks(m.body as unknown as RanksResponse);
      this.notify(h);
      return;
    }
    if (m.type === 'response' && m.command === Requests.focus && m.success && m.body?.focus !== undefined) {
      // A focus set by any client of this session (a command, the Debug Console) is the focus.
      h.ranks.focus = String(m.body.focus);
      this.notify(h);
      return;
    }
    if (m.type !== 'event') {
      return;
    }
    switch (m.event) {
      case 'initialized':
        this.schedule(h, true, false);
        break;
      case 'stopped':
        h.stacksStale = true;
        this.schedule(h, true, true);
        break;
      case 'continued':
        h.stacksStale = true;
        this.schedule(h, true, false);
        break;
      case Events.ranksChanged: {
        const body = m.body as RanksChangedEvent | undefined;
        const changed: RankState[] = body?.ranks ?? [];
        if (h.ranks.update(changed) > 0) {
          if (changed.some((r) => r.state !== 'stopped')) {
            h.stacksStale = true;
          }
          this.notify(h);
        }
        break;
      }
      case 'terminated':
      case 'exited':
        h.stacksStale = true;
        this.notify(h);
        break;
    }
  }

  /**
   * Coalesces refreshes: events that arrive within delay ms cause one round of requests, and a
   * round never overlaps the previous one.
   */
  private schedule(h: HpcSession, ranks: boolean, stacks: boolean, delay = 100): void {
    const id = h.session.id;
    let p = this.pending.get(id);
    if (!p) {
      p = { ranks: false, stacks: false };
      this.pending.set(id, p);
    }
    p.ranks ||= ranks;
    p.stacks ||= stacks;
    if (p.timer) {
      return;
    }
    const entry = p;
    entry.timer = setTimeout(() => {
      const prev = entry.running ?? Promise.resolve();
      entry.running = prev.then(async () => {
        entry.timer = undefined;
        const doRanks = entry.ranks;
        const doStacks = entry.stacks && this.stacksWanted;
        entry.ranks = false;
        // Stacks not fetched now stay stale and are fetched when the view becomes visible.
        entry.stacks = false;
        if (h.ended) {
          return;
        }
        if (doRanks) {
          await h.fetchRanks();
          if (h.ranksError) {
            this.log.warn(`${h.name}: ${Requests.ranks}: ${h.ranksError}`);
          }
        }
        const anyStopped = h.ranks.list().some((r) => r.state === 'stopped');
        if (doStacks && (anyStopped || h.ranks.size === 0)) {
          await h.fetchStacks(maxFrames());
          if (h.stacksError) {
            this.log.warn(`${h.name}: ${Requests.parallelStacks}: ${h.stacksError}`);
          }
        }
        this.notify(h);
      });
    }, delay);
  }

  dispose(): void {
    for (const p of this.pending.values()) {
      if (p.timer) {
        clearTimeout(p.timer);
      }
    }
    vscode.Disposable.from(...this.disposables).dispose();
  }
}

const resumeCommands = new Set(['continue', 'next', 'stepIn', 'stepOut', 'stepBack', 'reverseContinue', 'goto', 'restartFrame']);

/** The DAP messages the tracker sees: events and responses from the adapter. */
interface AdapterMessage {
  type: string;
  event?: string;
  command?: string;
  success?: boolean;
  body?: Record<string, unknown>;
}

/** The hpcdap.parallelStacks.maxFrames setting. */
export function maxFrames(): number {
  return vscode.workspace.getConfiguration('hpcdap').get<number>('parallelStacks.maxFrames', 64);
}

/**
 * The hpcdap.parallelStacks.mergeBy setting: "function" (one node per function, the default) or
 * "line" (one node per line).
 */
export function stacksMergeBy(): 'function' | 'line' {
  return vscode.workspace.getConfiguration('hpcdap').get<string>('parallelStacks.mergeBy', 'function') === 'line' ? 'line' : 'function';
}

/** The message of an error from a custom request. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
