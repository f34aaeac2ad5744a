// Crawlee on leased proxies: lease-backed sessions, reports from the crawler's own handlers,
// and every lease released when the crawl ends, however it ends.
//
// Crawlee 3.x: `newUrlFunction(sessionId, { request })` leases per (session, target host),
// and the sessions the pool makes are watched, so a session Crawlee retires (or that is
// used up, errors out or expires) releases its leases at once.
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
     * (`isBlocked`) as blocked, or an error without a response. After a 429, 401, 403, 407 or
     * a ban page the lease's proxy is done for the site (see leases.js). Returns
     * `{ leaseAgain, why }`, or null when the attempt used no lease.
     */
    async report(context, error) {
        if (!context || this.reported.has(context)) return null;
        const held = this.#leaseOf(context);
        if (!held) return null;
        this.reported.add(context);
        const { discovery } = this.keeper;
        const { id } = held.lease;
        const status = statusOf(context.response);
        if (status === undefined) {
            if (error && /\b407\b/.test(String(error.message ?? error))) {
                // The proxy refused the lease's credentials on CONNECT: lease again.
                await this.keeper.penalise(held, null, null);
                return { leaseAgain: true, why: '407 on CONNECT' };
            }
            this.keeper.reportInBackground(held, discovery.reportResultCall(id, 'error', held.host));
            return { leaseAgain: false, why: 'error' };
        }
        if (status >= 200 && status < 300 && this.owner.isBlocked && (await this.owner.isBlocked(context))) {
            await this.keeper.penalise(held, 'blocked', discovery.reportResultCall(id, 'blocked', held.host));
            return { leaseAgain: true, why: 'a ban page' };
        }
        if (status in LEASE_AGAIN) {
            await this.keeper.penalise(held, LEASE_AGAIN[status], discovery.reportStatusCall(id, status, held.host));
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

    /** The crawler's handlers, reporting first; a ban page throws Crawlee's SessionError so the page is tried again on another session. */
    handlers(crawlee, options) {
        const { requestHandler, errorHandler, failedRequestHandler } = options;
        return {
            requestHandler: async (context) => {
                const verdict = await this.report(context);
                if (verdict?.leaseAgain) throw new crawlee.SessionError(`proxy-operator: ${verdict.why}`);
                return (requestHandler ?? context.crawler?.router)?.(context);
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

    /** Crawlee 3 options: the proxy configuration, a watched session pool of `maxPoolSize`. */
    options3(crawlee, options, maxPoolSize) {
        const { createSessionFunction, ...poolOptions } = options.sessionPoolOptions ?? {};
        return {
            ...options,
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

