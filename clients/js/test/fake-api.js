// A stand-in of the discovery API for the helper's tests: a fetch that answers like the
// server (grants after `noMatch` 409s, maps statuses, releases by holder), records every
// call, and can be away (`down` calls fail as a refused connection, `unavailable` calls
// answer 503 with Retry-After: 0).

import assert from 'node:assert/strict';

export function fakeApi({ noMatch = 0, ttlSeconds = 300, proxies = [] } = {}) {
    const api = { calls: [], noMatch, granted: 0, down: 0, unavailable: 0, active: new Map(), proxies };
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
                return answer(409, { error: 'no_match', message: 'none', considered: 1 });
            }
            api.granted += 1;
            const n = api.granted;
            const name = api.proxies.length ? api.proxies[(n - 1) % api.proxies.length] : `p${n}`;
            api.active.set(`lease-${n}`, parsed.holder);
            return answer(201, {
                leaseID: `lease-${n}`,
                proxy: { namespace: 'crawl', name, host: '127.0.0.1', port: 3128, url: `http://${name}:pa%40ss@127.0.0.1:3128`, username: name, password: 'pa@ss' },
                target: parsed.target ?? null,
                expiresAt: '2030-01-01T00:00:00Z',
                ttlSeconds,
                holder: parsed.holder,
            });
        }
        if (method === 'POST' && pathname.endsWith('/report')) {
            if (parsed.result) return answer(204);
            const result = { 429: 'rate_limited', 401: 'blocked', 403: 'blocked', 407: null }[parsed.status]
                ?? (parsed.status >= 500 ? 'error' : 'ok');
            return answer(200, { result, leaseAgain: [401, 403, 407, 429].includes(parsed.status) });
        }
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
    api.paths = (method) => api.calls.filter(([m]) => m === method).map(([, path]) => path);
    api.reports = () => api.calls.filter(([, path]) => path.endsWith('/report')).map(([, path, body]) => [path, body]);
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
