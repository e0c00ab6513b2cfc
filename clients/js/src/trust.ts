// Which participant speaks for the agent, packet by packet, across takeovers; and the
// server's stanza sequence as a client follows it (the rules of client/trust.py and
// client/sequence.py).
//
// Trust goes to one participant (identity and sid), never to an identity: kind AGENT (set
// by the token, which only the API secret can mint) that announces the Alicia protocol
// (its alicia.protocol attribute is "1": an avatar or another framework's agent in the room
// is not ours), with an agent name only one whose lk.agent_name attribute (put in its
// token by livekit-server at dispatch) is that name. A
// standard participant joining under the agent's identity (livekit-server then removes the
// real agent as a duplicate) never gains trust. livekit-client reuses the departed agent's
// Participant object for the newcomer of the same identity (new sid and attributes, but
// the old kind, and no disconnect event), so the kind is the one each sid had when it
// joined, and the trusted sid is kept as a value (`current` notices the swap). Trust stays
// with the agent while it is in the room; when it leaves, a matching agent already there
// (one dispatched under the same name first) or the next one to join takes over.

import { ParticipantKind } from "livekit-client";

export const AGENT_NAME_ATTRIBUTE = "lk.agent_name";
/** The attribute an Alicia agent sets on itself once it serves the room (value "1"). */
export const PROTOCOL_ATTRIBUTE = "alicia.protocol";

/** What trust reads of a livekit-client Participant. */
export interface ParticipantLike {
  identity: string;
  sid: string;
  kind: ParticipantKind;
  attributes: Readonly<Record<string, string>>;
}

export class AgentTrust<P extends ParticipantLike = ParticipantLike> {
  /** The trusted agent's identity (undefined while none is trusted). */
  identity?: string;
  private sid?: string;
  private dispatchName = "";
  /** Each participant's kind when it joined, by sid. */
  private kinds = new Map<string, ParticipantKind>();

  /** `agentName`: trust only an agent dispatched under that name. */
  constructor(readonly agentName?: string) {}

  /** Note a participant that joined (or was there when the client joined). */
  joined(p: P): void {
    if (!this.kinds.has(p.sid)) this.kinds.set(p.sid, p.kind);
  }

  /** `p` may speak for the agent: kind AGENT when it joined, announcing the protocol, and
   * of the agent name if one is required. */
  matches(p: P): boolean {
    if (this.kinds.get(p.sid) !== ParticipantKind.AGENT) return false;
    if (p.attributes[PROTOCOL_ATTRIBUTE] !== "1") return false;
    return !this.agentName || p.attributes[AGENT_NAME_ATTRIBUTE] === this.agentName;
  }

  /** `p` is the trusted agent participant and still matches (checked for every packet). */
  trusts(p: P | undefined): boolean {
    return (
      p !== undefined &&
      this.sid !== undefined &&
      p.identity === this.identity &&
      p.sid === this.sid &&
      this.matches(p)
    );
  }

  /** The trusted agent if it is still in the room (`present`, by identity) and matches. */
  current(present: ReadonlyMap<string, P>): P | undefined {
    const p = this.identity !== undefined ? present.get(this.identity) : undefined;
    return p && this.trusts(p) ? p : undefined;
  }

  /** A participant joined (or was found): true if trust now moves to it. */
  offer(p: P, present: ReadonlyMap<string, P>): boolean {
    this.joined(p);
    if (!this.matches(p) || this.current(present)) return false;
    this.adopt(p);
    return true;
  }

  /** Forget the trusted agent if it is no longer in the room as itself (it left, or its
   * identity now belongs to another participant); true if it was trusted until now. */
  leave(present: ReadonlyMap<string, P>): boolean {
    if (this.identity === undefined || this.current(present)) return false;
    this.identity = this.sid = undefined;
    return true;
  }

  /** Trust a matching agent already in the room, if any (the same agent name first). */
  successor(present: ReadonlyMap<string, P>): P | undefined {
    const candidates = [...present.values()].filter((p) => this.matches(p));
    const same = candidates.filter((p) => (p.attributes[AGENT_NAME_ATTRIBUTE] ?? "") === this.dispatchName);
    const pool = same.length ? same : candidates;
    const found = pool[pool.length - 1];
    if (found) this.adopt(found);
    return found;
  }

  private adopt(p: P): void {
    this.identity = p.identity;
    this.sid = p.sid;
    this.dispatchName = p.attributes[AGENT_NAME_ATTRIBUTE] ?? "";
  }
}

/** Stanza ids remembered below the high mark (twice the largest replay an agent makes,
 * PROTOCOL.md §4.9's 1000): an older one is taken as seen. */
export const REMEMBERED = 2000;
/** How far above the high mark an unnamed envelope's id is taken as a hint. */
export const SUSPECT_AHEAD = 100;

/**
 * The server numbers its envelopes -1, -2, …; an agent that takes over continues the
 * sequence. An envelope whose id was accepted before is a replayed duplicate (§4.9:
 * clients de-duplicate by stanzaId), remembered as a set, not only as a high mark: after a
 * link came back, what the agent sent into the link going down can arrive below what came
 * through the new one. A resume's lastSequenceSeen is the high mark when the link or the
 * agent was lost (`lost()`), so the replay covers what the dying link dropped. A new agent
 * whose first envelope is at or below the mark did not continue the sequence (its worker
 * lost it): the sequence restarts from its numbers. An envelope whose sender livekit-client
 * could not name yet (its data outran the news of the agent's rejoining) is not taken, but
 * its id is a hint (`suspect()`): the next resume asks from below it, and only a resume
 * begun after the hint clears it (`suspects`). Anyone could send such a packet, so only a
 * plausible id is taken: above what the last resume asked from (`asking()`) and at most
 * SUSPECT_AHEAD above the high mark.
 */
export class ServerSequence {
  /** The highest |stanzaId| accepted (0: none). */
  high = 0;
  /** New agents that did not continue the sequence. */
  renumbered = 0;
  private numberedBy?: string;
  private got = new Set<number>();
  private mark?: number;
  private below?: number;
  private asked = 0;
  private suspectId?: number;
  /** Envelopes suspected dropped so far (`suspect()`). */
  suspects = 0;

  /** The lastSequenceSeen of the next resume (see the class). */
  get resumeFrom(): number {
    const point = this.mark ?? this.high;
    return this.below === undefined ? point : Math.min(point, this.below);
  }

  /** A resume begins: its lastSequenceSeen and the `suspects` so far (for `resumed`). */
  asking(): [number, number] {
    this.asked = this.resumeFrom;
    return [this.asked, this.suspects];
  }

  /** An envelope may have been dropped that no resume since asked for and that has not come since. */
  get suspected(): boolean {
    return this.below !== undefined;
  }

  /** A server envelope came from a sender no one vouches for: if it is not held, the next
   * resume asks from below it. True when that is new. */
  suspect(stanzaId: number): boolean {
    const n = -stanzaId;
    if (n <= Math.max(this.asked, this.high - REMEMBERED) || n > this.high + SUSPECT_AHEAD || this.got.has(n)) return false;
    // the lowest suspected id (n > undefined is false: the first one is taken)
    if (!(n > this.suspectId!)) this.below = (this.suspectId = n) - 1;
    this.suspects++;
    return true;
  }

  /** The link or the agent is gone: the next resume asks from what arrived by now. */
  lost(): void {
    this.mark ??= this.high;
  }

  /** A resume was answered: the next one asks from the high mark again, and from below a
   * suspected envelope only if one came after the resume began (`suspects`: the count when
   * it began; omitted: it covered them all). */
  resumed(suspects?: number): void {
    this.mark = undefined;
    if (suspects === undefined || suspects === this.suspects) this.below = this.suspectId = undefined;
  }

  /** True for a new server envelope from `agent`; false for a duplicate. */
  accept(agent: string, stanzaId: number): boolean {
    const n = -stanzaId;
    if (agent !== this.numberedBy) {
      if (this.numberedBy !== undefined && n > 0 && n <= this.high) {
        this.renumbered++;
        this.high = 0;
        this.mark = undefined;
        this.below = this.suspectId = undefined;
        this.asked = 0;
        this.got.clear();
      }
      this.numberedBy = agent;
    }
    if (n <= 0 || this.got.has(n) || n <= this.high - REMEMBERED) return false;
    this.got.add(n);
    if (n === this.suspectId) this.below = this.suspectId = undefined; // it came after all, named
    if (n > this.high) {
      this.high = n;
      if (this.got.size > 2 * REMEMBERED) {
        const floor = this.high - REMEMBERED;
        for (const s of this.got) if (s <= floor) this.got.delete(s);
      }
    }
    return true;
  }
}
