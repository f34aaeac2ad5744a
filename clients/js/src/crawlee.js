// Crawlee on leased proxies: lease-backed sessions, reports from the crawler's own handlers,
// and every lease released when the crawl ends, however it ends.
//
// Crawlee 3.x: `newUrlFunction(sessionId, { request })` leases per (session, target host),
// and the sessions the pool makes are watched, so a session Crawlee retires (or that is
// used up, errors out or expires) releases its leases at once.
// Timeouts: Crawlee 3 runs `newUrlFunction` inside the request's overall timeout, so the
// options add the longest lease wait to `requestHandlerTimeoutSecs`, and the helper's
// request handler times the crawler's own handler with the `requestHandlerTimeoutSecs` it
// was given: a wait for a proxy never eats into the handler's time or the navigation's.
// Crawlee 4.x: the proxy is the Session's, fixed when it is made, and `newUrlFunction` gets
// no request. `LeaseSessionPool` (the crawler's `sessionPool`) makes each session on a lease
// for one site; requests are pinned to their site's sessions through `request.sessionId`
// (`requests()`, `pin()`), so leases are still per (session, site).

import { LEASE_AGAIN } from './leases.js';

const WATCHED = Symbol('proxy-operator watched session');
const PIN = 'proxy-operator';

/** Whether `crawlee` (the module the crawler comes from) is Crawlee 4: its SessionPool makes sessions by itself (`newSession`), which 3.x's does not. */
export function isCrawlee4(crawlee) {
    return typeof crawlee?.SessionPool?.prototype?.newSession === 'function';
}

/** The status of a crawling context's response: a number (got, fetch) or a method (Playwright). */
export function statusOf(response) {
    if (!response) return undefined;
    if (typeof response.status === 'function') return response.status();
    return response.statusCode ?? response.status;
}

/** The default of Crawlee's `requestHandlerTimeoutSecs`. */
const HANDLER_TIMEOUT_SECS = 60;

/**
 * Whether `status` is an error of the local relay Crawlee's browser crawlers put between
 * the browser and the proxy (proxy-chain: 590 to 599, 597 for credentials the proxy refused),
 * not an answer of the site.
 */
export function isRelayError(status) {
    return status >= 590 && status <= 599;
}

/** `promise`, or a rejection after `ms` (the crawler's own handler timeout). */
async function within(promise, ms, what) {
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms / 1000} seconds.`)), ms);
    });
    try {
        return await Promise.race([promise, timeout]);
    } finally {
        clearTimeout(timer);
    }
}

/**
 * Node's codes for a TCP connection that was never made. Through a proxy that connection is
 * the proxy's: a site the proxy cannot reach is its 502/503 answer, or a refused tunnel. A
 * timeout of the request or of its answer may be the site's, and is not here (got's
 * `ETIMEDOUT` is, only when its `event` is `connect`). Crawlee 3 hands the handlers an
 * error that may keep only Node's message (`connect ECONNREFUSED 10.0.0.7:3128`, the
 * failed `connect` call), so that is read too.
 */
const UNREACHABLE = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH']);
const CONNECT_FAILED = /\bconnect (ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT)\b/;

/** Whether `error` says that the proxy itself could not be reached. */
export function isUnreachable(error) {
    for (let seen = error, depth = 0; seen && depth < 4; seen = seen.cause, depth += 1) {
        const code = seen.code;
        if (UNREACHABLE.has(code) || (code === 'ETIMEDOUT' && seen.event === 'connect')) return true;
        if (CONNECT_FAILED.test(String(seen.message ?? ''))) return true;
    }
    return false;
}

export function hostOf(url) {
    try {
        return new URL(url).hostname.toLowerCase();
    } catch {
        return '';
    }
}

/** Crawlee's pieces of the helper: everything that knows about sessions and contexts. */
export class CrawleeLeases {
    constructor(owner) {
        this.owner = owner;
        this.keeper = owner.keeper;
        /** The lease each request is on, in Crawlee 3 (a request is handled once at a time). */
        this.requestLease = new WeakMap();
        /** The lease each session is on, in Crawlee 4. */
        this.sessionLease = new Map();
        /** Crawling contexts already reported: one report per attempt. */
        this.reported = new WeakSet();
        /** Sessions watched, by ID, for the sweep. */
        this.sessions = new Map();
        this.sweep = setInterval(() => this.#sweep(), 2000);
        this.sweep.unref();
        this.pins = new Map();
        /** Whether the crawler is a browser crawler (`browserCrawlerOptions`). */
        this.browser = false;
    }

    /** Crawlee 3's `newUrlFunction(sessionId, { request })`: the URL of the session's lease for the request's host. */
    async newUrl(sessionId, { request } = {}) {
        // A browser crawler asks once more without a request, for the browser itself: its
        // pages each have a context on their own lease (useIncognitoPages), so the browser
        // gets no proxy and holds no lease.
        if (!request && this.browser) return null;
        const host = hostOf(request?.url);
        const held = await this.keeper.acquire(`${sessionId ?? ''} ${host}`, host);
        if (request) this.requestLease.set(request, held);
        return held.lease.url;
    }

    /** Watches a session: once it is no longer usable (retired, errored out, used up, expired), its leases go. */
    watch(session) {
        if (session[WATCHED]) return session;
        session[WATCHED] = true;
        this.sessions.set(session.id, session);
        for (const name of ['retire', 'markBad', 'markGood']) {
            const original = session[name]?.bind(session);
            if (!original) continue;
            session[name] = (...args) => {
                const result = original(...args);
                if (!session.isUsable()) this.#ended(session);
                return result;
            };
        }
        return session;
    }

    #ended(session) {
        this.sessions.delete(session.id);
        for (const slot of this.keeper.slotsOf(`${session.id} `)) this.keeper.endSlot(slot);
        const held = this.sessionLease.get(session.id);
        if (held) {
            this.sessionLease.delete(session.id);
            this.keeper.endSlot(held.slot);
        }
    }

    #sweep() {
        for (const session of this.sessions.values()) {
            if (!session.isUsable()) this.#ended(session);
        }
    }

    /**
     * Reports what an attempt saw, once per attempt: the response's status, a ban page
     * (`isBlocked`) as blocked, or an error without a response (a browser crawler's relay
     * error, 590 to 599, is an error too: never a page). After a 429, 401, 403, 407, a 597 or
     * a ban page the lease's proxy is done for the site (see leases.js): the lease is dropped
     * at once, and the report lands before the next lease for the site is asked for (not
     * awaited here: the wait is the next lease's, within its own time). Returns
     * `{ leaseAgain, why, error }` (`error`: not a page), or null when the attempt used no lease.
     */
    async report(context, error) {
        if (!context || this.reported.has(context)) return null;
        const held = this.#leaseOf(context);
        if (!held) return null;
        this.reported.add(context);
        const { discovery } = this.keeper;
        const { id } = held.lease;
        const status = statusOf(context.response);
        const penalise = (call) => {
            this.keeper.penalise(held, call).catch(() => {});
        };
        if (status === undefined || (this.browser && isRelayError(status))) {
            if (status === 597 || (error && /\b407\b/.test(String(error.message ?? error)))) {
                // The proxy refused the lease's credentials (on CONNECT, or to the relay): lease again.
                penalise(null);
                return { leaseAgain: true, why: status === 597 ? 'the relay answered 597' : '407 on CONNECT', error: true };
            }
            if (status === undefined && isUnreachable(error)) {
                // The proxy itself could not be reached: after a few such reports the lease
                // book takes it out for every crawler (passive health).
                penalise(discovery.reportResultCall(id, 'unreachable', held.host));
                return { leaseAgain: true, why: 'the proxy could not be reached', error: true };
            }
            this.keeper.reportInBackground(held, discovery.reportResultCall(id, 'error', held.host));
            return { leaseAgain: false, why: status === undefined ? 'error' : `the relay answered ${status}`, error: true };
        }
        if (status >= 200 && status < 300 && this.owner.isBlocked && (await this.owner.isBlocked(context))) {
            penalise(discovery.reportResultCall(id, 'blocked', held.host));
            return { leaseAgain: true, why: 'a ban page' };
        }
        if (status in LEASE_AGAIN) {
            penalise(discovery.reportStatusCall(id, status, held.host));
            return { leaseAgain: true, why: `status ${status}` };
        }
        this.keeper.reportInBackground(held, discovery.reportStatusCall(id, status, held.host));
        return { leaseAgain: false, why: `status ${status}` };
    }

    #leaseOf(context) {
        const fromRequest = context.request && this.requestLease.get(context.request);
        if (fromRequest) {
            this.requestLease.delete(context.request);
            return this.keeper.done(fromRequest.lease.id);
        }
        return context.session ? this.sessionLease.get(context.session.id) : undefined;
    }

    /**
     * The crawler's handlers, reporting first: a penalty (a ban page, 429, 403...) throws
     * Crawlee's SessionError so the page is tried again on another session, a relay error
     * an Error so it is retried; the crawler's own handler then runs within the
     * `requestHandlerTimeoutSecs` it was given (the options add the lease wait to Crawlee's).
     */
    handlers(crawlee, options) {
        const { requestHandler, errorHandler, failedRequestHandler } = options;
        const timeoutMs = (options.requestHandlerTimeoutSecs ?? HANDLER_TIMEOUT_SECS) * 1000;
        return {
            requestHandler: async (context) => {
                const verdict = await this.report(context);
                if (verdict?.leaseAgain) throw new crawlee.SessionError(`proxy-operator: ${verdict.why}`);
                if (verdict?.error) throw new Error(`proxy-operator: ${verdict.why}, not a page`);
                const handler = requestHandler ?? context.crawler?.router;
                return handler && within(Promise.resolve(handler(context)), timeoutMs, 'requestHandler');
            },
            errorHandler: async (context, error) => {
                await this.report(context, error);
                return errorHandler?.(context, error);
            },
            failedRequestHandler: async (context, error) => {
                await this.report(context, error);
                return failedRequestHandler?.(context, error);
            },
        };
    }

    /**
     * Crawlee's `requestHandlerTimeoutSecs` for `options`: the crawler's own, plus the longest
     * wait for a lease, which Crawlee times with it (the helper times the handler itself).
     */
    handlerTimeoutSecs(options) {
        return (options.requestHandlerTimeoutSecs ?? HANDLER_TIMEOUT_SECS) + Math.ceil(this.keeper.leaseWaitMs / 1000);
    }

    /** Crawlee 3 options: the proxy configuration, a watched session pool of `maxPoolSize`. */
    options3(crawlee, options, maxPoolSize) {
        const { createSessionFunction, ...poolOptions } = options.sessionPoolOptions ?? {};
        return {
            ...options,
            requestHandlerTimeoutSecs: this.handlerTimeoutSecs(options),
            useSessionPool: true,
            proxyConfiguration: new crawlee.ProxyConfiguration({ newUrlFunction: (id, o) => this.newUrl(id, o) }),
            sessionPoolOptions: {
                maxPoolSize,
                ...poolOptions,
                createSessionFunction: async (pool, made) => {
                    const session = createSessionFunction
                        ? await createSessionFunction(pool, made)
                        : new crawlee.Session({ ...pool.sessionOptions, ...made?.sessionOptions, sessionPool: pool });
                    return this.watch(session);
                },
            },
            ...this.handlers(crawlee, options),
        };
    }

    /** Crawlee 4 options: a lease-backed session pool, no proxy configuration (setting both is refused). */
    options4(crawlee, options, maxPoolSize) {
        const { proxyConfiguration, sessionPoolOptions, ...rest } = options;
        if (proxyConfiguration) throw new Error('proxy-operator: on Crawlee 4 the proxy is the session\'s: set no proxyConfiguration');
        return {
            ...rest,
            requestHandlerTimeoutSecs: this.handlerTimeoutSecs(options),
            sessionPool: new LeaseSessionPool(this, crawlee, { maxPoolSize, sessionOptions: sessionPoolOptions?.sessionOptions }),
            ...this.handlers(crawlee, options),
        };
    }

    /** The session ID that pins a request for `url` to one of its site's sessions. */
    pin(url) {
        const host = hostOf(url);
        const next = this.pins.get(host) ?? 0;
        this.pins.set(host, (next + 1) % this.owner.sessionsPerSite);
        return `${PIN}:${host}:${next}`;
    }

    close() {
        clearInterval(this.sweep);
    }
}

/**
 * Crawlee 4's `ISessionPool` on leases: `getSession(pin)` answers the usable session of that
 * pin (made on a lease for the pin's site when there is none), `getSession()` a session on a
 * lease with no site. A session that ends releases its lease.
 */
export class LeaseSessionPool {
    constructor(leases, crawlee, { maxPoolSize, sessionOptions = {} }) {
        this.leases = leases;
        this.crawlee = crawlee;
        this.maxPoolSize = maxPoolSize;
        this.sessionOptions = sessionOptions;
        /** The current session of each pin. */
        this.current = new Map();
        this.unpinned = 0;
    }

    async getSession(sessionId) {
        const pin = sessionId ?? `${PIN}::${this.unpinned++ % this.maxPoolSize}`;
        const current = this.current.get(pin);
        if (current?.isUsable()) return current;
        const host = pin.startsWith(`${PIN}:`) ? pin.split(':')[1] : '';
        // No proxy within the waits throws (NoProxy): the request is retried, where an
        // undefined session would fail it as a missing one.
        const held = await this.leases.keeper.acquire(pin, host);
        const { lease } = held;
        const session = new this.crawlee.Session({
            ...this.sessionOptions,
            proxyInfo: {
                url: lease.url,
                hostname: lease.hostname,
                port: lease.port,
                username: lease.username,
                password: lease.password ?? '',
            },
        });
        this.leases.sessionLease.set(session.id, held);
        this.current.set(pin, this.leases.watch(session));
        return session;
    }
}

