// Crawlee helper for proxy-operator's discovery API (docs/api.md). No dependencies: it
// speaks HTTP with the global fetch (Node.js 20).
//
//   const px = new ProxyOperator({ url, token, selector, ttlSeconds });
//   new ProxyConfiguration({ newUrlFunction: px.newUrlFunction });
//   requestHandler: await px.report(ctx); errorHandler / failedRequestHandler: await px.report(ctx, error);
//   px.releaseOnTeardown(crawler);
//
// One lease per (session, target host). Every report sends the response's status; the
// server maps it and answers whether to lease again (after 429, 401, 403 and 407), and then
// the lease is released and forgotten, so the next attempt leases another proxy. A failure
// without a response is reported as `error`, except a 407 from the proxy on CONNECT, which
// leases again. A 409 no_match backs off (0.5 s doubling to 10 s) for up to `noMatchWaitMs`,
// then throws, so Crawlee retries the request later: the helper never answers null, which
// would send the request without a proxy.

/** An error answer of the discovery API. */
export class ApiError extends Error {
    constructor(status, body) {
        super(`${status} ${body?.error ?? ''}: ${body?.message ?? ''}`);
        this.name = 'ApiError';
        this.status = status;
        this.code = body?.error;
        this.body = body;
    }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class ProxyOperator {
    /**
     * @param {object} options
     * @param {string} options.url the discovery API, `http://proxy-operator-discovery:8090`
     * @param {string} [options.token] its bearer token
     * @param {Record<string, string>} [options.selector] label terms the proxies must carry
     * @param {number} [options.ttlSeconds] lease duration (default 300); a lease ending within
     *   `renewMarginMs` (default 5000) is replaced before it is handed out
     * @param {number} [options.noMatchWaitMs] how long to wait for a proxy on 409 (default 60000)
     * @param {typeof fetch} [options.fetch] for tests
     */
    constructor({
        url,
        token,
        selector = {},
        ttlSeconds = 300,
        renewMarginMs = 5000,
        noMatchWaitMs = 60000,
        fetch = globalThis.fetch,
    }) {
        if (!url) throw new Error('ProxyOperator: url (the discovery API) is required');
        this.base = url.replace(/\/+$/, '');
        this.token = token;
        this.selector = selector;
        this.ttlSeconds = ttlSeconds;
        this.renewMarginMs = renewMarginMs;
        this.noMatchWaitMs = noMatchWaitMs;
        this.fetch = fetch;
        /** @type {Map<string, {id: string, url: string, proxy: string, host: string, expiresAt: number}>} */
        this.leases = new Map();
        /** Pending lease requests per key, so concurrent requests share one lease. */
        this.pending = new Map();
        this.stats = { leases: 0, releases: 0, noMatch: 0, leaseAgain: 0, reports: {} };
        this.newUrlFunction = this.newUrlFunction.bind(this);
    }

    /** Crawlee's `newUrlFunction(sessionId, { request })`: the proxy URL of the session's lease for the request's host. */
    async newUrlFunction(sessionId, { request } = {}) {
        const host = hostOf(request?.url);
        const key = keyOf(sessionId, host);
        const lease = this.leases.get(key);
        if (lease && lease.expiresAt - this.renewMarginMs > Date.now()) return lease.url;
        if (!this.pending.has(key)) {
            const leasing = this.#replace(key, host).finally(() => this.pending.delete(key));
            this.pending.set(key, leasing);
        }
        return (await this.pending.get(key)).url;
    }

    /**
     * Reports what the request saw: the response's status, or `error` for a failure
     * without one. Call it from `requestHandler` (`report(ctx)`), `errorHandler` and
     * `failedRequestHandler` (`report(ctx, error)`). Returns the server's answer for a
     * status (`{result, leaseAgain}`), or null.
     */
    async report(context, error) {
        const key = keyOf(context.session?.id, hostOf(context.request?.url));
        const lease = this.leases.get(key);
        if (!lease) return null;
        const status = context.response?.statusCode ?? context.response?.status;
        if (status === undefined && error && /\b407\b/.test(String(error.message ?? error))) {
            // The proxy refused the lease's credentials on CONNECT: lease again.
            this.stats.leaseAgain += 1;
            await this.#drop(key, lease);
            return { result: null, leaseAgain: true };
        }
        const body = status === undefined ? { result: 'error' } : { status };
        body.target = lease.host || undefined;
        let answer;
        try {
            answer = await this.#call('POST', `/v1/leases/${encodeURIComponent(lease.id)}/report`, body);
        } catch (failure) {
            // A lease forgotten (404) or an API failure: the crawl goes on.
            return null;
        }
        const result = status === undefined ? 'error' : (answer.result ?? 'none');
        this.stats.reports[result] = (this.stats.reports[result] ?? 0) + 1;
        if (answer?.leaseAgain) {
            this.stats.leaseAgain += 1;
            await this.#drop(key, lease);
        }
        return answer ?? null;
    }

    /** Reports a ban page only the crawler can recognise (a captcha with 200) and leases again. */
    async reportBlocked(context) {
        const key = keyOf(context.session?.id, hostOf(context.request?.url));
        const lease = this.leases.get(key);
        if (!lease) return;
        await this.#call('POST', `/v1/leases/${encodeURIComponent(lease.id)}/report`, { result: 'blocked', target: lease.host || undefined });
        this.stats.reports.blocked = (this.stats.reports.blocked ?? 0) + 1;
        await this.#drop(key, lease);
    }

    /** Releases every lease held. */
    async releaseAll() {
        const leases = [...this.leases.entries()];
        this.leases.clear();
        await Promise.all(leases.map(([, lease]) => this.#release(lease)));
    }

    /** Releases every lease when the crawler tears down (at the end of `crawler.run()`). */
    releaseOnTeardown(crawler) {
        const teardown = crawler.teardown.bind(crawler);
        crawler.teardown = async (...args) => {
            await this.releaseAll();
            return teardown(...args);
        };
        return crawler;
    }

    async #replace(key, host) {
        const old = this.leases.get(key);
        if (old) {
            this.leases.delete(key);
            await this.#release(old);
        }
        const lease = await this.#lease(host);
        this.leases.set(key, lease);
        return lease;
    }

    async #lease(host) {
        let waited = 0;
        let backoff = 500;
        for (;;) {
            try {
                const body = { selector: this.selector, ttlSeconds: this.ttlSeconds };
                if (host) body.target = host;
                const granted = await this.#call('POST', '/v1/leases', body);
                this.stats.leases += 1;
                return {
                    id: granted.leaseID,
                    url: granted.proxy.url,
                    proxy: `${granted.proxy.namespace}/${granted.proxy.name}`,
                    host,
                    expiresAt: Date.now() + granted.ttlSeconds * 1000,
                };
            } catch (error) {
                if (!(error instanceof ApiError) || error.status !== 409) throw error;
                this.stats.noMatch += 1;
                if (waited >= this.noMatchWaitMs) {
                    throw new Error(`proxy-operator: no proxy for ${host} after ${waited} ms: ${JSON.stringify(error.body)}`);
                }
                await sleep(backoff);
                waited += backoff;
                backoff = Math.min(backoff * 2, 10000);
            }
        }
    }

    async #drop(key, lease) {
        if (this.leases.get(key) === lease) this.leases.delete(key);
        await this.#release(lease);
    }

    async #release(lease) {
        try {
            await this.#call('DELETE', `/v1/leases/${encodeURIComponent(lease.id)}`);
            this.stats.releases += 1;
        } catch {
            // Released or not, the lease expires on its own.
        }
    }

    /** One call, retried on 503 (the lease book is moving between replicas) after Retry-After. */
    async #call(method, path, body) {
        const headers = { 'content-type': 'application/json' };
        if (this.token) headers.authorization = `Bearer ${this.token}`;
        for (let attempt = 0; ; attempt += 1) {
            const response = await this.fetch(`${this.base}${path}`, {
                method,
                headers,
                body: body === undefined ? undefined : JSON.stringify(body),
            });
            const text = await response.text();
            const answer = text ? JSON.parse(text) : null;
            if (response.ok) return answer;
            if (response.status === 503 && attempt < 10) {
                await sleep(Number(response.headers.get('retry-after') ?? 1) * 1000);
                continue;
            }
            throw new ApiError(response.status, answer);
        }
    }
}

function hostOf(url) {
    try {
        return new URL(url).hostname.toLowerCase();
    } catch {
        return '';
    }
}

function keyOf(sessionId, host) {
    return `${sessionId ?? ''}\u0000${host}`;
}
