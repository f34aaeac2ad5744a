// The leases of a crawler, kept the way every helper of this package keeps them. A lease
// belongs to a slot (a Crawlee session and a site, or a site alone) and is for one target
// host; a slot holds up to `leasesPerSlot` leases, and a caller gets the one with the fewest
// requests in flight.
//
// - The book is the one clock. Which proxy may go to which site, and when again, is the
//   lease book's to say: no cooldown is kept here. After a penalty the keeper leases again
//   and takes what the book grants; on 409 it waits as long as the answer says
//   (`retryAfterSeconds`: when the first proxy cooling down for the site is free), polling
//   with a backoff when proxies at capacity may free a place sooner.
// - Each answer is reported once, on the lease it came through (one already dropped or
//   released too: the book keeps ended leases for late reports), with a report ID of its own,
//   so that a report sent again after an attempt whose answer was lost counts once. A
//   penalty's report is sent until it lands, before any new lease for the host is asked for:
//   never on another lease.
// - A penalty ends the proxy for the host at once. After a 429, 401, 403 or 407 (the
//   server's own table, LEASE_AGAIN, applied here so that it holds while the API is away) or
//   a ban page, every lease on that proxy for the host is dropped, in every slot
//   (`dropListeners` hears of each), the report lands, and the leases are released. A report
//   whose answer says leaseAgain (the proxy cools down for the site, whoever reported it)
//   drops its lease too.
// - The API blinks: every call is retried as `Discovery.run` says; a request waits for a
//   lease at most `noMatchWaitMs` on 409 plus `apiWaitMs` while the API is away (`leaseWaitMs`).
// - Every lease is released on every ending: `close()` ends every wait at once, lands the
//   reports in the air (at most `apiWaitMs`), releases every lease held, then every lease of
//   the holder (DELETE /v1/leases?holder=, the ones whose grant answer never arrived too).

import { ApiError, Stopped, Unavailable } from './api.js';

/** What the server's table says of a status seen through a proxy, for the ones after which a crawler leases again (docs/api.md, Report). */
export const LEASE_AGAIN = Object.freeze({ 429: 'rate_limited', 401: 'blocked', 403: 'blocked', 407: null });

/** No lease for a host: none fitted within the wait, the API was away longer than its bound, or the crawler is stopping. */
export class NoProxy extends Error {
    constructor(message) {
        super(`proxy-operator: ${message}`);
        this.name = 'NoProxy';
    }
}

/** A granted lease as the helpers use it. */
export function leaseOf(granted, host) {
    const { proxy } = granted;
    const bracketed = proxy.host.includes(':') ? `[${proxy.host}]` : proxy.host;
    return {
        id: granted.leaseID,
        url: proxy.url,
        proxy: `${proxy.namespace}/${proxy.name}`,
        server: `http://${bracketed}:${proxy.port}`,
        hostname: proxy.host,
        port: proxy.port,
        username: proxy.username,
        password: proxy.password,
        target: host,
        expiresAt: Date.now() + granted.ttlSeconds * 1000,
    };
}

/** What a slot's look says when each of its leases has its fill of requests in flight. */
const FULL = Symbol('full');

/** A promise and its `resolve` (Node 20 has no `Promise.withResolvers`). */
function resolvable() {
    let resolve;
    const promise = new Promise((r) => {
        resolve = r;
    });
    return { promise, resolve };
}

export class LeaseKeeper {
    /** Resolved, and replaced, whenever a request in flight ends or a lease is dropped. */
    #placeFreed = resolvable();

    /**
     * @param {import('./api.js').Discovery} discovery
     * @param {object} [options]
     */
    constructor(discovery, {
        selector = {},
        ttlSeconds = 300,
        renewMarginMs = 5000,
        leasesPerSlot = 1,
        noMatchWaitMs = 300000,
    } = {}) {
        this.discovery = discovery;
        this.selector = selector;
        this.ttlSeconds = ttlSeconds;
        this.renewMarginMs = renewMarginMs;
        this.leasesPerSlot = Math.max(1, leasesPerSlot);
        this.noMatchWaitMs = noMatchWaitMs;
        /** Who hears of each lease dropped (a browser context on it closes). */
        this.dropListeners = new Set();
        /** @type {Map<string, {held: object[], lock: Promise<void>}>} */
        this.slots = new Map();
        /** Reports of a penalty not landed yet, by host: a new lease for the host waits for them. */
        this.pending = new Map();
        /** Leases granted and not released, by ID: what closing releases. */
        this.leases = new Map();
        /** Every lease granted, by ID: requests in flight when their lease was dropped are judged all the same. */
        this.known = new Map();
        this.background = new Set();
        this.stats = { leases: 0, releases: 0, noMatch: 0, leaseAgain: 0, reports: {}, reportsRepeated: 0, reportsLost: 0, releasedByHolder: 0 };
        this.closing = false;
        /** Set once `close()` stops waiting for the reports in the air. */
        this.abandoned = false;
        this.stopping = () => this.closing;
    }

    /** The longest a request waits for a lease: `noMatchWaitMs` on 409, plus `apiWaitMs` while the API is away. */
    get leaseWaitMs() {
        return this.noMatchWaitMs + this.discovery.apiWaitMs;
    }

    /**
     * A lease of `slot` for `host`, counted in flight until `done`; throws `NoProxy`. The slot
     * holds up to `most` leases (`leasesPerSlot`), each at most `perLease` requests in flight:
     * past that, the caller waits here until one is `done` or a lease is dropped.
     */
    async acquire(slot, host, most = this.leasesPerSlot, perLease = Infinity) {
        const entry = this.#slot(slot);
        const deadline = Date.now() + this.leaseWaitMs;
        for (;;) {
            await this.#settled(host, deadline);
            const freed = this.#placeFreed.promise; // taken before looking: no freeing is missed
            const held = await this.#locked(entry, async () => {
                if (this.pending.get(host)?.size) return null; // a penalty came while waiting
                for (const old of entry.held.filter((h) => h.lease.expiresAt - this.renewMarginMs <= Date.now())) {
                    this.#drop(old);
                    this.inBackground(this.release(old));
                }
                if (entry.held.length < most) {
                    // The first lease of a slot waits for a proxy; the others are a bonus.
                    const fresh = await this.#newLease(slot, host, entry.held.length === 0 ? deadline : null);
                    if (fresh) entry.held.push(fresh);
                }
                if (!entry.held.length) return null;
                const chosen = entry.held.reduce((a, b) => (b.inFlight < a.inFlight ? b : a));
                if (chosen.inFlight >= perLease) return FULL;
                chosen.inFlight += 1;
                return chosen;
            });
            if (held === FULL) {
                await freed;
                if (this.closing) throw new NoProxy('stopping');
                continue;
            }
            if (held) {
                // The slot ended (its session was retired) while this lease was being taken:
                // the request still uses it, and it is released once it is done.
                if (this.slots.get(slot) !== entry) held.orphan = true;
                return held;
            }
        }
    }

    /** The lease a request went through (dropped or not), no longer counted in flight. */
    done(leaseId) {
        const held = this.known.get(leaseId);
        if (held) held.inFlight = Math.max(0, held.inFlight - 1);
        this.#freePlace();
        if (held?.orphan && held.inFlight === 0) {
            this.#drop(held);
            this.inBackground(this.release(held));
        }
        return held;
    }

    /** A new lease for `host`; with no `deadline` one try (null on 409), else waiting on 409 as the answers say, until the deadline. */
    async #newLease(slot, host, deadline) {
        let waited = 0;
        let backoff = 500;
        for (;;) {
            const left = deadline === null ? Infinity : deadline - Date.now();
            let granted;
            try {
                granted = await this.discovery.run(this.discovery.leaseCall(host, this.selector, this.ttlSeconds), {
                    droppable: true,
                    stopping: this.stopping,
                    boundMs: Math.min(this.discovery.apiWaitMs, left),
                });
            } catch (error) {
                if (error instanceof Stopped) throw new NoProxy(`stopped while leasing for ${host}`);
                if (error instanceof Unavailable) throw new NoProxy(`the discovery API is away: ${error.message}`);
                if (!(error instanceof ApiError) || error.status !== 409) throw error;
                this.stats.noMatch += 1;
                if (deadline === null) return null;
                const wait = waitOn409(error, backoff, Math.min(this.noMatchWaitMs - waited, left));
                if (wait === null) throw new NoProxy(`no proxy for ${host} within ${this.noMatchWaitMs} ms: ${JSON.stringify(error.body)}`);
                try {
                    await this.discovery.sleep(wait, { droppable: true, stopping: this.stopping });
                } catch {
                    throw new NoProxy(`stopped while waiting for a proxy for ${host}`);
                }
                waited += wait;
                backoff = Math.min(backoff * 2, 10000);
                continue;
            }
            const held = { lease: leaseOf(granted, host), host, slot, inFlight: 0, dropped: false, extra: undefined };
            this.leases.set(held.lease.id, held);
            this.known.set(held.lease.id, held);
            this.stats.leases += 1;
            if (this.closing) {
                await this.release(held);
                throw new NoProxy('stopping');
            }
            return held;
        }
    }

    /**
     * The proxy of `held` is done for its host: drops it (and every other lease on it for the
     * host) at once, then sends the report until it lands (no new lease for the host is asked
     * for before), then releases. The drop and the hold on new leases take effect before the
     * first await: a caller may leave the landing to the next lease for the host.
     */
    async penalise(held, call) {
        if (!held.dropped) this.stats.leaseAgain += 1;
        const same = [...this.leases.values()].filter((h) => h === held || (h.host === held.host && h.lease.proxy === held.lease.proxy));
        if (!same.includes(held)) same.push(held);
        for (const each of same) this.#drop(each);
        // Sent until it lands (close() bounds it): the book hears of every penalty on the
        // lease it happened on, never later on another one.
        const reporting = call ? this.#report(held, call, { boundMs: Infinity }) : Promise.resolve();
        const pending = this.pending.get(held.host) ?? new Set();
        this.pending.set(held.host, pending);
        pending.add(reporting);
        try {
            await reporting;
        } finally {
            pending.delete(reporting);
        }
        for (const each of same) this.inBackground(this.release(each));
    }

    /** A report nothing waits for (an ok, an error); a leaseAgain answer still drops the lease. */
    reportInBackground(held, call) {
        this.inBackground(this.#report(held, call));
    }

    /** Drops and releases every lease of `slot` (a session Crawlee retired). */
    endSlot(slot) {
        const entry = this.slots.get(slot);
        if (!entry) return;
        this.slots.delete(slot);
        for (const held of entry.held) {
            this.#drop(held);
            this.inBackground(this.release(held));
        }
    }

    /** The slots whose names start with `prefix` (a session's sites). */
    slotsOf(prefix) {
        return [...this.slots.keys()].filter((slot) => slot.startsWith(prefix));
    }

    #drop(held) {
        if (held.dropped) return;
        held.dropped = true;
        const entry = this.slots.get(held.slot);
        if (entry) entry.held = entry.held.filter((h) => h !== held);
        for (const listener of this.dropListeners) listener(held);
        this.#freePlace(); // its slot may take another lease
    }

    /** Wakes every caller waiting for a place in flight (`acquire`'s `perLease`). */
    #freePlace() {
        const freed = this.#placeFreed;
        this.#placeFreed = resolvable();
        freed.resolve();
    }

    async #report(held, call, { boundMs } = {}) {
        let answer;
        try {
            // Droppable only once close() gave up waiting for it.
            answer = await this.discovery.run(call, { boundMs, droppable: true, stopping: () => this.abandoned });
        } catch (error) {
            if (error instanceof Unavailable || error instanceof Stopped) this.stats.reportsLost += 1;
            // Forgotten (404), refused, or never landed: the page is still good.
            return null;
        }
        const result = call.body.result ?? answer?.result ?? 'none';
        this.stats.reports[result] = (this.stats.reports[result] ?? 0) + 1;
        if (answer?.repeated) this.stats.reportsRepeated += 1;
        if (answer?.leaseAgain && !held.dropped) {
            // The proxy cools down for the site (until answer.cooldownUntil), or the lease is over.
            this.stats.leaseAgain += 1;
            this.#drop(held);
            await this.release(held);
        }
        return answer;
    }

    async release(held) {
        if (!this.leases.delete(held.lease.id)) return;
        try {
            await this.discovery.run(this.discovery.releaseCall(held.lease.id));
            this.stats.releases += 1;
        } catch {
            this.leases.set(held.lease.id, held);
        }
    }

    inBackground(promise) {
        const task = promise.catch(() => {}).finally(() => this.background.delete(task));
        this.background.add(task);
    }

    /** Ends every wait, lands the reports in the air, releases every lease held and then every lease of the holder. */
    async close() {
        this.closing = true;
        this.#freePlace();
        const inAir = [...this.background, ...[...this.pending.values()].flatMap((set) => [...set])];
        await Promise.race([Promise.allSettled(inAir), new Promise((r) => setTimeout(r, this.discovery.apiWaitMs).unref())]);
        this.abandoned = true;
        for (const held of this.leases.values()) this.#drop(held);
        await Promise.all([...this.leases.values()].map((held) => this.release(held)));
        try {
            const answer = await this.discovery.run(this.discovery.releaseHeldCall());
            this.stats.releasedByHolder += answer?.released ?? 0;
        } catch {
            // Released or not, the leases expire on their own.
        }
        return this.leases.size === 0;
    }

    #slot(slot) {
        let entry = this.slots.get(slot);
        if (!entry) {
            entry = { held: [], lock: Promise.resolve() };
            this.slots.set(slot, entry);
        }
        return entry;
    }

    /** Waits for the penalty reports of `host` to land, until `deadline`. */
    async #settled(host, deadline) {
        while (this.pending.get(host)?.size) {
            const left = deadline - Date.now();
            if (left <= 0) throw new NoProxy(`a report on a proxy for ${host} did not land within the wait`);
            let timer;
            const timeout = new Promise((resolve) => {
                timer = setTimeout(resolve, left);
            });
            await Promise.race([Promise.allSettled([...this.pending.get(host)]), timeout]);
            clearTimeout(timer);
        }
    }

    async #locked(entry, fn) {
        const before = entry.lock;
        let unlock;
        entry.lock = new Promise((resolve) => {
            unlock = resolve;
        });
        await before;
        try {
            return await fn();
        } finally {
            unlock();
        }
    }
}

/**
 * How long to wait after a 409 before asking again, or null to give up: the time the answer
 * names when nothing but cooldowns stands in the way (given up at once when that is past
 * what is `left` of the wait), else the backoff, never past that time.
 */
export function waitOn409(error, backoffMs, leftMs) {
    if (leftMs <= 0) return null;
    const retryAfterMs = error.retryAfterMs;
    if (error.onlyCooling) return retryAfterMs <= leftMs ? retryAfterMs : null;
    return Math.min(backoffMs, retryAfterMs ?? backoffMs, leftMs);
}
