// The Crawlee helper against a stand-in of the discovery API (a fetch that answers like
// the server and records every call); the run through real squid and the real operator is
// the e2e test tests/tests/e2e/crawlers.rs.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { ProxyOperator } from '../src/index.js';

/** A fetch answering like the discovery API: `noMatch` 409s first, then grants. */
function fakeApi({ noMatch = 0, ttlSeconds = 300 } = {}) {
    const api = { calls: [], noMatch, granted: 0 };
    api.fetch = async (url, { method, headers, body }) => {
        assert.equal(headers.authorization, 'Bearer t0ken');
        const path = new URL(url).pathname;
        const parsed = body ? JSON.parse(body) : undefined;
        api.calls.push([method, path, parsed]);
        const answer = (status, json) => new Response(json === undefined ? null : JSON.stringify(json), { status });
        if (method === 'POST' && path === '/v1/leases') {
            if (api.noMatch > 0) {
                api.noMatch -= 1;
                return answer(409, { error: 'no_match', message: 'none', considered: 1 });
            }
            api.granted += 1;
            const n = api.granted;
            return answer(201, {
                leaseID: `lease-${n}`,
                proxy: { namespace: 'crawl', name: `p${n}`, host: '127.0.0.1', port: 3128, url: `http://user${n}:pa%40ss@127.0.0.1:3128` },
                target: parsed.target ?? null,
                expiresAt: '2030-01-01T00:00:00Z',
                ttlSeconds,
            });
        }
        if (method === 'POST' && path.endsWith('/report')) {
            if (parsed.result) return answer(204);
            const result = { 429: 'rate_limited', 401: 'blocked', 403: 'blocked', 407: null }[parsed.status]
                ?? (parsed.status >= 500 ? 'error' : 'ok');
            return answer(200, { result, leaseAgain: [401, 403, 407, 429].includes(parsed.status) });
        }
        if (method === 'DELETE') return answer(204);
        return answer(404, { error: 'not_found', message: path });
    };
    api.paths = (method) => api.calls.filter(([m]) => m === method).map(([, path]) => path);
    return api;
}

const helper = (api, options = {}) => new ProxyOperator({
    url: 'http://discovery.test:8090/', token: 't0ken', selector: { geo: 'eu' }, fetch: api.fetch, ...options,
});
const ctx = (session, url, statusCode) => ({
    session: { id: session }, request: { url }, response: statusCode === undefined ? undefined : { statusCode },
});

test('one lease per session and host, its url handed to Crawlee as it is', async () => {
    const api = fakeApi();
    const px = helper(api);
    const a = await px.newUrlFunction('s1', { request: { url: 'https://a.example/1' } });
    const again = await px.newUrlFunction('s1', { request: { url: 'https://A.example/2' } });
    const b = await px.newUrlFunction('s1', { request: { url: 'https://b.example/' } });
    const other = await px.newUrlFunction('s2', { request: { url: 'https://a.example/' } });
    assert.equal(a, 'http://user1:pa%40ss@127.0.0.1:3128');
    assert.equal(again, a);
    assert.equal(b, 'http://user2:pa%40ss@127.0.0.1:3128');
    assert.equal(other, 'http://user3:pa%40ss@127.0.0.1:3128');
    assert.deepEqual(api.calls[0], ['POST', '/v1/leases', { selector: { geo: 'eu' }, ttlSeconds: 300, target: 'a.example' }]);
    // Concurrent requests of one session to one host share one lease.
    const [x, y] = await Promise.all([
        px.newUrlFunction('s3', { request: { url: 'https://c.example/1' } }),
        px.newUrlFunction('s3', { request: { url: 'https://c.example/2' } }),
    ]);
    assert.equal(x, y);
    assert.equal(px.stats.leases, 4);
});

test('every status is reported; a rate limit or a block drops the lease so the retry leases again', async () => {
    const api = fakeApi();
    const px = helper(api);
    await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } });
    assert.deepEqual(await px.report(ctx('s1', 'https://a.example/', 200)), { result: 'ok', leaseAgain: false });
    assert.deepEqual(await px.report(ctx('s1', 'https://a.example/', 429)), { result: 'rate_limited', leaseAgain: true });
    assert.deepEqual(api.paths('DELETE'), ['/v1/leases/lease-1']);
    const next = await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } });
    assert.equal(next, 'http://user2:pa%40ss@127.0.0.1:3128');
    assert.deepEqual(await px.report(ctx('s1', 'https://a.example/', 403)), { result: 'blocked', leaseAgain: true });
    const reports = api.calls.filter(([, path]) => path.endsWith('/report')).map(([, path, body]) => [path, body]);
    assert.deepEqual(reports, [
        ['/v1/leases/lease-1/report', { status: 200, target: 'a.example' }],
        ['/v1/leases/lease-1/report', { status: 429, target: 'a.example' }],
        ['/v1/leases/lease-2/report', { status: 403, target: 'a.example' }],
    ]);
    assert.deepEqual(px.stats.reports, { ok: 1, rate_limited: 1, blocked: 1 });
    // Nothing leased for it: nothing to report.
    assert.equal(await px.report(ctx('s9', 'https://z.example/', 200)), null);
});

test('a failure without a response is an error report; a 407 on CONNECT leases again', async () => {
    const api = fakeApi();
    const px = helper(api);
    await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } });
    assert.equal(await px.report(ctx('s1', 'https://a.example/'), new Error('ETIMEDOUT')), null);
    assert.deepEqual(api.calls.at(-1), ['POST', '/v1/leases/lease-1/report', { result: 'error', target: 'a.example' }]);
    assert.deepEqual(api.paths('DELETE'), [], 'the lease is kept: the health engine judges the proxy');
    const answer = await px.report(ctx('s1', 'https://a.example/'), new Error('Proxy responded with 407 Proxy Authentication Required'));
    assert.deepEqual(answer, { result: null, leaseAgain: true });
    assert.deepEqual(api.paths('DELETE'), ['/v1/leases/lease-1']);
    assert.equal(await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } }), 'http://user2:pa%40ss@127.0.0.1:3128');
});

test('no_match backs off and then leases, or throws without answering null', async () => {
    const api = fakeApi({ noMatch: 1 });
    const px = helper(api, { noMatchWaitMs: 400 });
    assert.equal(await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } }), 'http://user1:pa%40ss@127.0.0.1:3128');
    assert.equal(px.stats.noMatch, 1);
    api.noMatch = 10;
    await assert.rejects(px.newUrlFunction('s2', { request: { url: 'https://b.example/' } }), /no proxy for b\.example/);
});

test('an expiring lease is replaced, and teardown releases every lease', async () => {
    const api = fakeApi({ ttlSeconds: 3 });
    const px = helper(api, { ttlSeconds: 3, renewMarginMs: 5000 });
    const first = await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } });
    const second = await px.newUrlFunction('s1', { request: { url: 'https://a.example/' } });
    assert.notEqual(first, second);
    assert.deepEqual(api.paths('DELETE'), ['/v1/leases/lease-1']);
    await px.newUrlFunction('s1', { request: { url: 'https://b.example/' } });
    let tornDown = false;
    const crawler = { async teardown() { tornDown = true; } };
    px.releaseOnTeardown(crawler);
    await crawler.teardown();
    assert.ok(tornDown);
    assert.deepEqual(api.paths('DELETE').sort(), ['/v1/leases/lease-1', '/v1/leases/lease-2', '/v1/leases/lease-3']);
    assert.equal(px.leases.size, 0);
});
