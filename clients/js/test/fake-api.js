// A stand-in of the discovery API for the helper's tests: a fetch that answers like the
// server (grants after `noMatch` 409s saying `noMatchBody`, maps statuses, answers reports
// with the result, leaseAgain, the cooldown's end and whether the report ID was heard,
// releases by holder), records every call, and can be away (`down` calls fail as a refused
// connection, `unavailable` calls answer 503 with Retry-After: 0). A rate_limited or blocked
// report cools (proxy, target) down for `cooldownMs`.

import assert from 'node:assert/strict';

export function fakeApi({ noMatch = 0, ttlSeconds = 300, proxies = [] } = {}) {
    const api = {
        calls: [],
        noMatch,
        noMatchBody: { considered: 1, atCapacity: 1, inCooldown: 0, unhealthy: 0 },
        granted: 0,
        down: 0,
        unavailable: 0,
        active: new Map(),
        proxies,
        cooldownMs: 300000,
        /** `${proxy} ${target}` -> when its cooldown ends (ms). */
        cooling: new Map(),
        /** lease ID -> [proxy, target]. */
        leaseOf: new Map(),
        heard: new Set(),
    };
    const answer = (status, json, headers = {}) =>
        new Response(json === undefined ? null : JSON.stringify(json), { status, headers });
    api.fetch = async (url, { method, headers, body }) => {
        assert.equal(headers.authorization, 'Bearer t0ken');
        const { pathname, search } = new URL(url);
        const parsed = body ? JSON.parse(body) : undefined;
        api.calls.push([method, pathname + search, parsed]);
        if (api.down > 0) {
            api.down -= 1;
            throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } });
        }
        if (api.unavailable > 0) {
            api.unavailable -= 1;
            return answer(503, { error: 'unavailable', message: 'moving' }, { 'retry-after': '0' });
        }
        if (method === 'POST' && pathname === '/v1/leases') {
            if (api.noMatch > 0) {
                api.noMatch -= 1;
                return answer(409, { error: 'no_match', message: 'none', ...api.noMatchBody });
            }
            api.granted += 1;
            const n = api.granted;
            const name = api.proxies.length ? api.proxies[(n - 1) % api.proxies.length] : `p${n}`;
            api.active.set(`lease-${n}`, parsed.holder);
            api.leaseOf.set(`lease-${n}`, [name, parsed.target ?? null]);
            return answer(201, {
                leaseID: `lease-${n}`,
                proxy: { namespace: 'crawl', name, host: '127.0.0.1', port: 3128, url: `http://${name}:pa%40ss@127.0.0.1:3128`, username: name, password: 'pa@ss' },
                target: parsed.target ?? null,
                expiresAt: '2030-01-01T00:00:00Z',
                ttlSeconds,
                holder: parsed.holder,
            });
        }
        if (method === 'POST' && pathname.endsWith('/report')) return answer(200, api.report(pathname.split('/')[3], parsed));
        if (method === 'DELETE' && pathname === '/v1/leases') {
            const holder = new URLSearchParams(search).get('holder');
            const mine = [...api.active].filter(([, h]) => h === holder).map(([id]) => id);
            for (const id of mine) api.active.delete(id);
            return answer(200, { released: mine.length });
        }
        if (method === 'DELETE') {
            api.active.delete(pathname.split('/').at(-1));
            return answer(204);
        }
        if (method === 'GET' && pathname === '/v1/proxies') {
            return answer(200, { proxies: [{ maxLeases: 4 }, { maxLeases: 4 }, { maxLeases: 4 }, { maxLeases: 4 }, { maxLeases: 4 }], count: 5 });
        }
        return answer(404, { error: 'not_found', message: pathname });
    };
    /** The answer to a report, as the server makes it. */
    api.report = (leaseId, body) => {
        const result = body.result
            ?? { 429: 'rate_limited', 401: 'blocked', 403: 'blocked', 407: null }[body.status]
            ?? (body.status >= 500 ? 'error' : 'ok');
        const asks = body.result ? ['rate_limited', 'blocked', 'unreachable'].includes(body.result) : [401, 403, 407, 429].includes(body.status);
        const [proxy, leaseTarget] = api.leaseOf.get(leaseId) ?? ['?', null];
        const target = body.target ?? leaseTarget;
        const pair = `${leaseId} ${body.reportID}`;
        const repeated = body.reportID !== undefined && api.heard.has(pair);
        if (body.reportID !== undefined) api.heard.add(pair);
        const key = `${proxy} ${target}`;
        if (['rate_limited', 'blocked'].includes(result) && !repeated) {
            api.cooling.set(key, Math.max(Date.now() + api.cooldownMs, api.cooling.get(key) ?? 0));
        }
        const until = api.cooling.get(key) ?? 0;
        const cooling = until > Date.now();
        return {
            result,
            leaseAgain: asks || cooling || !api.active.has(leaseId),
            target,
            cooldownUntil: cooling ? new Date(until).toISOString() : null,
            cooldownSeconds: cooling ? Math.max(1, Math.ceil((until - Date.now()) / 1000)) : null,
            repeated,
        };
    };
    api.paths = (method) => api.calls.filter(([m]) => m === method).map(([, path]) => path);
    /** Every report that reached the API, without its report ID (`reportIds` has them). */
    api.reports = () =>
        api.calls.filter(([, path]) => path.endsWith('/report')).map(([, path, { reportID, ...body }]) => [path, body]);
    /** The report IDs of the reports that reached `path`, in order. */
    api.reportIds = (path) => api.calls.filter(([, p]) => p === path).map(([, , body]) => body.reportID);
    api.index = (method, path) => api.calls.findIndex(([m, p]) => m === method && p === path);
    return api;
}

/** A Crawlee-like Session: usable until retired or marked bad three times. */
export class FakeSession {
    static made = 0;

    constructor(options = {}) {
        FakeSession.made += 1;
        this.options = options;
        this.id = options.id ?? `session_${FakeSession.made}`;
        this.proxyInfo = options.proxyInfo;
        this.errorScore = 0;
        this.retired = false;
    }

    isUsable() {
        return !this.retired && this.errorScore < 3;
    }

    retire() {
        this.retired = true;
    }

    markBad() {
        this.errorScore += 1;
    }

    markGood() {
        this.errorScore = Math.max(0, this.errorScore - 0.5);
    }
}

export class SessionError extends Error {}

export class ProxyConfiguration {
    constructor({ newUrlFunction }) {
        this.newUrlFunction = newUrlFunction;
    }
}

/** The pieces of a Crawlee 3 module the helper uses. */
export const crawlee3 = {
    Session: FakeSession,
    SessionError,
    ProxyConfiguration,
    SessionPool: class {
        async getSession() {}
    },
};

/** The pieces of a Crawlee 4 module the helper uses (its pool has `newSession`). */
export const crawlee4 = {
    ...crawlee3,
    SessionPool: class {
        async getSession() {}

        async newSession() {}
    },
};

/**
 * A stand-in of a Playwright browser: `made` lists its contexts. A context keeps its route
 * guard (`guarded()` asks it about a request: ['continue'] or ['abort', reason]) and its
 * `response` listeners (`answer(status)` sends them a response as Playwright would, and
 * returns it, for `judge`).
 */
export function fakeBrowser() {
    const made = [];
    const browser = {
        made,
        async newContext(options) {
            const listeners = [];
            const context = {
                options,
                closed: false,
                async close() { this.closed = true; },
                async route(pattern, handler) { this.guard = handler; },
                on(event, listener) { if (event === 'response') listeners.push(listener); },
                guarded() {
                    let done;
                    this.guard({ abort: (reason) => { done = ['abort', reason]; }, continue: () => { done = ['continue']; } });
                    return done;
                },
                answer(status, { page = true, body = '' } = {}) {
                    const response = fakeResponse(status, { page, body });
                    for (const listener of listeners) listener(response);
                    return response;
                },
            };
            made.push(context);
            return context;
        },
    };
    return browser;
}

/** A Playwright response of `status` with `body`: to a page's own navigation, or (`page: false`) to one of its resources. */
export function fakeResponse(status, { page = true, body = '' } = {}) {
    const frame = { parentFrame: () => null };
    const request = { isNavigationRequest: () => page, frame: () => frame };
    return { status: () => status, request: () => request, text: async () => body };
}
