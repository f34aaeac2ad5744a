// A client of proxy-operator's discovery API (docs/api.md) on the global fetch (Node.js 20).
//
// The API is a service that blinks: the operator restarts, the lease book moves between
// replicas (503 with Retry-After), a connection is refused for a few seconds. Every call is
// therefore retried on a network error, a timeout and a 5xx, with exponential backoff and full
// jitter (Retry-After when the answer has one), until `apiWaitMs` have passed since its first
// attempt; only then does it throw `Unavailable`. Answers the caller acts on (409 no_match,
// 404 unknown_lease, a 400) are thrown at once as `ApiError`.

import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';

/** An error answer of the discovery API: `status` and the `code` of its JSON body. */
export class ApiError extends Error {
    constructor(status, body) {
        super(`${status} ${body?.error ?? ''}: ${body?.message ?? ''}`);
        this.name = 'ApiError';
        this.status = status;
        this.code = body?.error;
        this.body = body;
    }

    /**
     * On a 409: milliseconds until the first proxy cooling down for the target is free (the
     * server's `retryAfterSeconds`), or undefined when none is cooling down.
     */
    get retryAfterMs() {
        const seconds = this.body?.retryAfterSeconds;
        return typeof seconds === 'number' ? seconds * 1000 : undefined;
    }

    /** On a 409: whether only cooldowns stand in the way, so nothing frees a place before `retryAfterMs`. */
    get onlyCooling() {
        return this.retryAfterMs !== undefined && !this.body?.atCapacity && !this.body?.unhealthy;
    }
}

/** The API did not answer within `apiWaitMs` (network errors, timeouts, 5xx). */
export class Unavailable extends ApiError {
    constructor(call, status, cause, retries) {
        super(status, { error: 'unavailable', message: `${call.method} ${call.path}: no answer after ${retries} retries (${cause})` });
        this.name = 'Unavailable';
    }
}

/** The caller is stopping: a call that may be dropped was not retried further. */
export class Stopped extends Error {
    constructor(what) {
        super(`stopped: ${what}`);
        this.name = 'Stopped';
    }
}

/** One attempt failed in a way worth retrying. */
class Transient extends Error {
    constructor(status, why, retryAfterMs) {
        super(why);
        this.status = status;
        this.retryAfterMs = retryAfterMs;
    }
}

/**
 * Exponential backoff with full jitter (a random wait up to 250 ms, doubling to at most 5 s),
 * or the answer's Retry-After, while `boundMs` have not passed since the first attempt.
 */
export class Backoff {
    constructor(boundMs, { firstMs = 250, capMs = 5000, now = Date.now, random = Math.random } = {}) {
        this.now = now;
        this.random = random;
        this.deadline = now() + boundMs;
        this.ceiling = firstMs;
        this.capMs = capMs;
        this.retries = 0;
    }

    /** How long to wait before the next attempt, or null when the bound is spent. */
    delay(retryAfterMs) {
        const left = this.deadline - this.now();
        if (left <= 0) return null;
        const wait = retryAfterMs ?? this.ceiling * this.random();
        this.ceiling = Math.min(this.ceiling * 2, this.capMs);
        this.retries += 1;
        return Math.max(0, Math.min(wait, left));
    }
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** `<library>/<host name>/<process id>`, in the characters a holder may have. */
export function defaultHolder(library) {
    const host = hostname().replace(/[^A-Za-z0-9._-]/g, '-') || 'host';
    return `${library}/${host}/${process.pid}`.slice(0, 128);
}

/** The discovery API at `url`. */
export class Discovery {
    /**
     * @param {object} options
     * @param {string} options.url `http://proxy-operator-discovery:8090`
     * @param {string} [options.token] its bearer token
     * @param {number} [options.apiWaitMs] how long one call is retried while the API is away (60000)
     * @param {number} [options.timeoutMs] one attempt's bound (10000)
     * @param {string} [options.holder] the name every lease carries (`node/<host>/<pid>`)
     * @param {typeof fetch} [options.fetch] for tests
     */
    constructor({ url, token, apiWaitMs = 60000, timeoutMs = 10000, holder, fetch = globalThis.fetch }) {
        if (!url) throw new Error('proxy-operator: url (the discovery API) is required');
        this.base = url.replace(/\/+$/, '');
        this.token = token;
        this.apiWaitMs = apiWaitMs;
        this.timeoutMs = timeoutMs;
        this.holder = holder ?? defaultHolder('node');
        this.fetch = fetch;
        this.retries = 0;
    }

    leaseCall(target, selector, ttlSeconds) {
        const body = { selector: selector ?? {}, ttlSeconds, holder: this.holder };
        if (target) body.target = target;
        return { method: 'POST', path: '/v1/leases', body };
    }

    /**
     * A report of the status the crawler saw. The answer says what was recorded, whether to
     * lease again and until when the proxy cools down for the site; the call carries a
     * `reportID` of its own, so that sending it again counts it once.
     */
    reportStatusCall(leaseId, status, target) {
        return this.#reportCall(leaseId, { status }, target);
    }

    /** A result said directly (a connection error, a ban page only the crawler recognises); answered alike. */
    reportResultCall(leaseId, result, target) {
        return this.#reportCall(leaseId, { result }, target);
    }

    #reportCall(leaseId, saw, target) {
        const body = { ...saw, target: target || undefined, reportID: randomUUID() };
        return { method: 'POST', path: `/v1/leases/${encodeURIComponent(leaseId)}/report`, body };
    }

    releaseCall(leaseId) {
        return { method: 'DELETE', path: `/v1/leases/${encodeURIComponent(leaseId)}` };
    }

    /** Every active lease of this holder: those whose grant answer never arrived too. */
    releaseHeldCall() {
        return { method: 'DELETE', path: `/v1/leases?holder=${encodeURIComponent(this.holder)}` };
    }

    /**
     * `call`, retried as the module says. With `droppable`, `stopping()` true ends the waits
     * with `Stopped`.
     */
    async run(call, { droppable = false, stopping = () => false, boundMs = this.apiWaitMs } = {}) {
        const backoff = new Backoff(boundMs);
        for (;;) {
            if (droppable && stopping()) throw new Stopped(`${call.method} ${call.path}`);
            try {
                return await this.attempt(call);
            } catch (error) {
                if (!(error instanceof Transient)) throw error;
                const delay = backoff.delay(error.retryAfterMs);
                if (delay === null) throw new Unavailable(call, error.status, error.message, backoff.retries);
                this.retries += 1;
                await this.sleep(delay, { droppable, stopping });
            }
        }
    }

    /** Sleeps, looking at `stopping` every quarter second when the wait may be dropped. */
    async sleep(ms, { droppable = false, stopping = () => false } = {}) {
        const end = Date.now() + ms;
        for (let left = ms; left > 0; left = end - Date.now()) {
            if (droppable && stopping()) throw new Stopped('stopping');
            await sleep(Math.min(left, 250));
        }
    }

    /** One exchange: the JSON answer, or `Transient`, `ApiError`. */
    async attempt({ method, path, body }) {
        const headers = { 'content-type': 'application/json' };
        if (this.token) headers.authorization = `Bearer ${this.token}`;
        let response;
        let text;
        try {
            response = await this.fetch(`${this.base}${path}`, {
                method,
                headers,
                body: body === undefined ? undefined : JSON.stringify(body),
                signal: AbortSignal.timeout(this.timeoutMs),
            });
            text = await response.text();
        } catch (error) {
            // Refused, reset, timed out: nothing to act on but time.
            throw new Transient(0, `${error.name}: ${error.cause?.code ?? error.message}`);
        }
        let answer = null;
        try {
            answer = text ? JSON.parse(text) : null;
        } catch {
            if (response.ok || response.status >= 500) throw new Transient(response.status, 'an answer cut short');
        }
        if (response.ok) return answer ?? {};
        if (response.status >= 500) {
            const after = Number(response.headers.get('retry-after'));
            const retryAfterMs = Number.isFinite(after) && response.headers.has('retry-after') ? after * 1000 : undefined;
            // The server's message says why (a failover, a book it cannot save): a crawler
            // that gives up says it too.
            const why = answer?.message ? `: ${answer.message}` : '';
            throw new Transient(response.status, `${response.status} ${answer?.error ?? ''}${why}`, retryAfterMs);
        }
        throw new ApiError(response.status, answer);
    }
}
