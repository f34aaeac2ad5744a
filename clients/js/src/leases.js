// The leases of a crawler, kept the way every helper of this package keeps them. A lease
// belongs to a slot (a Crawlee session and a site, or a site alone) and is for one target
// host; a slot holds up to `leasesPerSlot` leases, and a caller gets the one with the fewest
// requests in flight.
//
// - A penalty ends the proxy for the host at once. After a 429, 401, 403 or 407 (the
//   server's own table, LEASE_AGAIN, applied here so that it holds while the API is away) or
//   a ban page, every lease on that proxy for the host is dropped, in every slot (`dropListeners`
//   hears of each), the report lands before any new lease for the host is asked for, and the
//   leases are released. The proxy is remembered for the host: should the server grant it
//   again (it never heard the report), the grant is reported and released, and another is
//   asked for.
// - The API blinks: every call is retried as `Discovery.run` says; a lease waits up to
//   `apiWaitMs`, and on 409 no_match up to `noMatchWaitMs` more.
// - Every lease is released on every ending: `close()` ends every wait at once, lands the
//   reports in the air, releases every lease held, then every lease of the holder
//   (DELETE /v1/leases?holder=, the ones whose grant answer never arrived too).

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

export class LeaseKeeper {
    /**
     * @param {import('./api.js').Discovery} discovery
     * @param {object} [options]
     */
    constructor(discovery, {
        selector = {},
        ttlSeconds = 300,
        renewMarginMs = 5000,
        leasesPerSlot = 1,
        noMatchWaitMs = 60000,
        localCooldownMs = 300000,
    } = {}) {
        this.discovery = discovery;
        this.selector = selector;
        this.ttlSeconds = ttlSeconds;
        this.renewMarginMs = renewMarginMs;
        this.leasesPerSlot = Math.max(1, leasesPerSlot);
        this.noMatchWaitMs = noMatchWaitMs;
        this.localCooldownMs = localCooldownMs;
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
        /** `${proxy} ${host}` -> {result, until}: proxies seen penalised for a host. */
        this.penalised = new Map();
        this.background = new Set();
        this.stats = { leases: 0, releases: 0, noMatch: 0, leaseAgain: 0, refusedPenalised: 0, reports: {}, reportsLost: 0, releasedByHolder: 0 };
        this.closing = false;
        this.stopping = () => this.closing;
    }

    /**
     * A lease of `slot` for `host`, counted in flight until `done`; throws `NoProxy`. The slot
     * holds up to `most` leases (`leasesPerSlot`).
     */
    async acquire(slot, host, most = this.leasesPerSlot) {
        const entry = this.#slot(slot);
        for (;;) {
            await this.#settled(host);
            const held = await this.#locked(entry, async () => {
                if (this.pending.get(host)?.size) return null; // a penalty came while waiting
                for (const old of entry.held.filter((h) => h.lease.expiresAt - this.renewMarginMs <= Date.now())) {
                    this.#drop(old, null);
                    this.inBackground(this.release(old));
                }
                if (entry.held.length < most) {
                    // The first lease of a slot waits for a proxy; the others are a bonus.
                    const fresh = await this.#newLease(slot, host, entry.held.length === 0);
                    if (fresh) entry.held.push(fresh);
                }
                if (!entry.held.length) return null;
                const chosen = entry.held.reduce((a, b) => (b.inFlight < a.inFlight ? b : a));
                chosen.inFlight += 1;
                return chosen;
            });
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
        if (held?.orphan && held.inFlight === 0) {
            this.#drop(held, null);
            this.inBackground(this.release(held));
        }
        return held;
    }

    async #newLease(slot, host, wait) {
        let waited = 0;
        let backoff = 500;
        for (;;) {
            let granted;
            try {
                granted = await this.discovery.run(this.discovery.leaseCall(host, this.selector, this.ttlSeconds), {
                    droppable: true,
                    stopping: this.stopping,
                });
            } catch (error) {
                if (error instanceof Stopped) throw new NoProxy(`stopped while leasing for ${host}`);
                if (error instanceof Unavailable) throw new NoProxy(`the discovery API is away: ${error.message}`);
                if (!(error instanceof ApiError) || error.status !== 409) throw error;
                this.stats.noMatch += 1;
                if (!wait) return null;
                if (waited >= this.noMatchWaitMs) throw new NoProxy(`no proxy for ${host} after ${waited} ms: ${JSON.stringify(error.body)}`);
                try {
                    await this.discovery.sleep(backoff, { droppable: true, stopping: this.stopping });
                } catch {
                    throw new NoProxy(`stopped while waiting for a proxy for ${host}`);
                }
                waited += backoff;
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
            const known = this.penalised.get(`${held.lease.proxy} ${host}`);
            if (known && known.until > Date.now()) {
                // The server did not hear of this proxy's penalty (a report lost while it was
                // away): tell it on this lease, which starts the cooldown, and lease again.
                this.stats.refusedPenalised += 1;
                await this.penalise(held, known.result, this.discovery.reportResultCall(held.lease.id, known.result, host));
                continue;
            }
            return held;
        }
    }

    /**
     * The proxy of `held` is done for its host: drops it (and every other lease on it for the
     * host), lands the report before any new lease for the host, then releases.
     */
    async penalise(held, result, call) {
        if (!held.dropped) this.stats.leaseAgain += 1;
        const same = [...this.leases.values()].filter((h) => h === held || (h.host === held.host && h.lease.proxy === held.lease.proxy));
        if (!same.includes(held)) same.push(held);
        for (const each of same) this.#drop(each, result);
        const reporting = call ? this.#report(held, call) : Promise.resolve();
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
            this.#drop(held, null);
            this.inBackground(this.release(held));
        }
    }

    /** The slots whose names start with `prefix` (a session's sites). */
    slotsOf(prefix) {
        return [...this.slots.keys()].filter((slot) => slot.startsWith(prefix));
    }

    #drop(held, result) {
        if (held.dropped) return;
        held.dropped = true;
        const entry = this.slots.get(held.slot);
        if (entry) entry.held = entry.held.filter((h) => h !== held);
        if (result) this.penalised.set(`${held.lease.proxy} ${held.host}`, { result, until: Date.now() + this.localCooldownMs });
        for (const listener of this.dropListeners) listener(held);
    }

    async #report(held, call) {
        let answer;
        try {
            answer = await this.discovery.run(call);
        } catch (error) {
            if (error instanceof Unavailable) this.stats.reportsLost += 1;
            // Forgotten (404), refused, or never landed: the page is still good.
            return null;
        }
        const result = call.body.result ?? answer?.result ?? 'none';
        this.stats.reports[result] = (this.stats.reports[result] ?? 0) + 1;
        if (answer?.leaseAgain && !held.dropped) {
            this.stats.leaseAgain += 1;
            this.#drop(held, answer.result);
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
        await Promise.race([Promise.all([...this.background]), new Promise((r) => setTimeout(r, this.discovery.apiWaitMs).unref())]);
        for (const held of this.leases.values()) this.#drop(held, null);
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

    async #settled(host) {
        while (this.pending.get(host)?.size) await Promise.allSettled([...this.pending.get(host)]);
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
