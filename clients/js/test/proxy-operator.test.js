// The helper against a stand-in of the discovery API (test/fake-api.js) and stand-ins of
// Crawlee's Session and Playwright's browser; the crawl through real squid, the real
// operator, real Crawlee and real chromium is the e2e test tests/tests/e2e/crawlers.rs.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Backoff, Discovery, ProxyOperator, Unavailable, credentialsInProxyUrl, isCrawlee4, statusOf } from '../src/index.js';
import { FakeSession, crawlee3, crawlee4, fakeApi, fakeBrowser, fakeResponse } from './fake-api.js';

const helper = (api, options = {}) => new ProxyOperator({
    url: 'http://discovery.test:8090/', token: 't0ken', selector: { geo: 'eu' }, holder: 'test/holder', fetch: api.fetch, ...options,
});
const request = (url) => ({ url });
const context = (session, req, statusCode, body = 'page') => ({
    session, request: req, response: statusCode === undefined ? undefined : { statusCode }, body,
});
const settle = async (px) => {
    while (px.keeper.background.size) await Promise.all([...px.keeper.background]);
};

test('backoff doubles a jittered ceiling to a cap, takes Retry-After, and stops at the bound', () => {
    let now = 0;
    const backoff = new Backoff(10000, { firstMs: 250, capMs: 1000, now: () => now, random: () => 1 });
    assert.deepEqual([backoff.delay(), backoff.delay(), backoff.delay(), backoff.delay()], [250, 500, 1000, 1000]);
    assert.equal(new Backoff(10000, { now: () => now, random: () => 0 }).delay(), 0, 'full jitter');
    assert.equal(backoff.delay(3000), 3000);
    now = 9500;
    assert.equal(backoff.delay(3000), 500, 'never past the bound');
    now = 10000;
    assert.equal(backoff.delay(), null);
});

test('a call is retried on refused connections and 503, not on 409, and gives up after its bound', async () => {
    const api = fakeApi();
    const discovery = new Discovery({ url: 'http://discovery.test:8090', token: 't0ken', fetch: api.fetch, apiWaitMs: 5000 });
    api.down = 2;
    api.unavailable = 1;
    const granted = await discovery.run(discovery.leaseCall('a.example', {}, 300));
    assert.equal(granted.leaseID, 'lease-1');
    assert.equal(api.paths('POST').length, 4);
    api.noMatch = 1;
    await assert.rejects(discovery.run(discovery.leaseCall('a.example', {}, 300)), (e) => e.status === 409);
    const short = new Discovery({ url: 'http://discovery.test:8090', token: 't0ken', fetch: api.fetch, apiWaitMs: 300 });
    api.down = 1000;
    await assert.rejects(short.run(short.releaseCall('lease-1')), Unavailable);
    api.down = 0;
    api.unavailable = 1000;
    await assert.rejects(short.run(short.releaseCall('lease-1')), (e) => e instanceof Unavailable && /\(503 unavailable: moving\)$/.test(e.message),
        'giving up on 503s says what the server said');
});

test('Crawlee 3: one lease per session and host, carrying its holder', async () => {
    const api = fakeApi();
    const px = helper(api);
    const a = await px.newUrlFunction('s1', { request: request('https://a.example/1') });
    const again = await px.newUrlFunction('s1', { request: request('https://A.example/2') });
    const b = await px.newUrlFunction('s1', { request: request('https://b.example/') });
    const other = await px.newUrlFunction('s2', { request: request('https://a.example/') });
    assert.equal(a, 'http://p1:pa%40ss@127.0.0.1:3128');
    assert.equal(again, a);
    assert.equal(b, 'http://p2:pa%40ss@127.0.0.1:3128');
    assert.equal(other, 'http://p3:pa%40ss@127.0.0.1:3128');
    assert.deepEqual(api.calls[0], ['POST', '/v1/leases', { selector: { geo: 'eu' }, ttlSeconds: 300, holder: 'test/holder', target: 'a.example' }]);
    await px.close();
});

test('a rate limit drops every lease on the proxy for the site, and its report lands before the next lease', async () => {
    const api = fakeApi({ proxies: ['p1', 'p1', 'p2'] });
    const px = helper(api);
    const [s1, s2] = [new FakeSession({ id: 's1' }), new FakeSession({ id: 's2' })];
    const r1 = request('https://a.example/1');
    const r2 = request('https://a.example/2');
    await px.newUrlFunction('s1', { request: r1 });
    await px.newUrlFunction('s2', { request: r2 });
    const verdict = await px.report(context(s1, r1, 429));
    assert.deepEqual(verdict, { leaseAgain: true, why: 'status 429' });
    // s2's lease is on the same proxy for the same site: dropped too.
    const next = await px.newUrlFunction('s2', { request: request('https://a.example/3') });
    assert.equal(next, 'http://p2:pa%40ss@127.0.0.1:3128');
    assert.ok(api.index('POST', '/v1/leases/lease-1/report') < api.calls.findLastIndex(([m, p]) => m === 'POST' && p === '/v1/leases'));
    await settle(px);
    assert.deepEqual(api.paths('DELETE').sort(), ['/v1/leases/lease-1', '/v1/leases/lease-2']);
    // Its own late answer (in flight when the lease went) is reported, and changes nothing more.
    assert.deepEqual(await px.report(context(s2, r2, 200)), { leaseAgain: false, why: 'status 200' });
    await px.close();
});

test('each attempt is reported once; a ban page counts as blocked only', async () => {
    const api = fakeApi();
    const px = helper(api, { isBlocked: (ctx) => ctx.body.includes('captcha') });
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await px.newUrlFunction('s1', { request: req });
    const ctx = context(session, req, 200, '<form id="captcha">');
    assert.deepEqual(await px.report(ctx), { leaseAgain: true, why: 'a ban page' });
    assert.equal(await px.report(ctx, new Error('SessionError')), null, 'the errorHandler of the same attempt reports nothing');
    await px.newUrlFunction('s1', { request: req });
    await px.report(context(session, req, 200, 'the page'));
    await settle(px);
    assert.deepEqual(api.reports(), [
        ['/v1/leases/lease-1/report', { result: 'blocked', target: 'a.example' }],
        ['/v1/leases/lease-2/report', { status: 200, target: 'a.example' }],
    ]);
    assert.deepEqual(px.stats.reports, { blocked: 1, ok: 1 });
    await px.close();
});

test('a failure without a response is an error report; a 407 on CONNECT leases again', async () => {
    const api = fakeApi();
    const px = helper(api);
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await px.newUrlFunction('s1', { request: req });
    assert.deepEqual(await px.report(context(session, req), new Error('ETIMEDOUT')), { leaseAgain: false, why: 'error', error: true });
    await settle(px);
    assert.deepEqual(api.reports().at(-1), ['/v1/leases/lease-1/report', { result: 'error', target: 'a.example' }]);
    assert.deepEqual(api.paths('DELETE'), [], 'the lease is kept: the health engine judges the proxy');
    await px.newUrlFunction('s1', { request: req });
    const answer = await px.report(context(session, req), new Error('Proxy responded with 407 Proxy Authentication Required'));
    assert.deepEqual(answer, { leaseAgain: true, why: '407 on CONNECT', error: true });
    assert.equal(await px.newUrlFunction('s1', { request: req }), 'http://p2:pa%40ss@127.0.0.1:3128');
    await px.close();
});

test('a proxy that cannot be reached is reported unreachable and leased again; a slow answer stays an error', async () => {
    const api = fakeApi();
    const px = helper(api);
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    const fail = (code, event) => Object.assign(new Error(`${event ?? 'connect'} ${code} 127.0.0.1:3128`), { code, event });
    await px.newUrlFunction('s1', { request: req });
    assert.deepEqual((await px.report(context(session, req), fail('ECONNREFUSED'))).leaseAgain, true);
    await px.newUrlFunction('s1', { request: req });
    assert.deepEqual((await px.report(context(session, req), fail('ETIMEDOUT', 'connect'))).leaseAgain, true);
    // Crawlee 3 hands over Node's message alone, without the code.
    await px.newUrlFunction('s1', { request: req });
    assert.deepEqual((await px.report(context(session, req), new Error('connect ECONNREFUSED 127.0.0.1:3128'))).leaseAgain, true);
    await px.newUrlFunction('s1', { request: req });
    assert.deepEqual(await px.report(context(session, req), fail('ETIMEDOUT', 'response')),
        { leaseAgain: false, why: 'error', error: true });
    await settle(px);
    assert.deepEqual(api.reports(), [
        ['/v1/leases/lease-1/report', { result: 'unreachable', target: 'a.example' }],
        ['/v1/leases/lease-2/report', { result: 'unreachable', target: 'a.example' }],
        ['/v1/leases/lease-3/report', { result: 'unreachable', target: 'a.example' }],
        ['/v1/leases/lease-4/report', { result: 'error', target: 'a.example' }],
    ]);
    await px.close();
});

test('Crawlee 3: a session the crawler retires, or that errors out, releases its leases', async () => {
    const api = fakeApi();
    const px = helper(api);
    const options = px.crawlerOptions(crawlee3, { maxConcurrency: 8 });
    assert.equal(options.sessionPoolOptions.maxPoolSize, 10);
    assert.equal(options.useSessionPool, true);
    const pool = { sessionOptions: { maxAgeSecs: 60 } };
    const retired = await options.sessionPoolOptions.createSessionFunction(pool, {});
    const erred = await options.sessionPoolOptions.createSessionFunction(pool, {});
    assert.equal(retired.options.maxAgeSecs, 60);
    for (const session of [retired, erred]) {
        await options.proxyConfiguration.newUrlFunction(session.id, { request: request('https://a.example/') });
        await options.proxyConfiguration.newUrlFunction(session.id, { request: request('https://b.example/') });
    }
    retired.retire();
    for (let i = 0; i < 3; i += 1) erred.markBad();
    await settle(px);
    assert.deepEqual(api.paths('DELETE').sort(), ['/v1/leases/lease-1', '/v1/leases/lease-2', '/v1/leases/lease-3', '/v1/leases/lease-4']);
    await px.close();
});

test('the handlers report before the crawler\'s own, and a ban page throws a SessionError', async () => {
    const api = fakeApi();
    const px = helper(api, { isBlocked: (ctx) => ctx.body.includes('captcha') });
    const seen = [];
    const options = px.crawlerOptions(crawlee3, {
        requestHandler: async (ctx) => seen.push(['page', ctx.request.url]),
        failedRequestHandler: async (ctx, error) => seen.push(['failed', error.message]),
    });
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await options.proxyConfiguration.newUrlFunction('s1', { request: req });
    await assert.rejects(options.requestHandler(context(session, req, 200, 'captcha')), crawlee3.SessionError);
    await options.proxyConfiguration.newUrlFunction('s1', { request: req });
    await options.requestHandler(context(session, req, 200, 'fine'));
    assert.deepEqual(seen, [['page', 'https://a.example/']]);
    await px.close();
});

test('Crawlee 4: sessions on leases, one site each through pinned requests; a retired one releases its lease', async () => {
    assert.equal(isCrawlee4(crawlee4), true);
    assert.equal(isCrawlee4(crawlee3), false);
    const api = fakeApi();
    const px = helper(api, { sessionsPerSite: 2 });
    const options = px.crawlerOptions(crawlee4, { maxConcurrency: 8, sessionPoolOptions: { maxPoolSize: 4 } });
    assert.equal(options.proxyConfiguration, undefined, 'Crawlee 4 refuses both');
    assert.throws(() => px.crawlerOptions(crawlee4, { proxyConfiguration: {} }), /no proxyConfiguration/);
    const requests = px.requests(['https://a.example/1', 'https://a.example/2', 'https://a.example/3', 'https://b.example/1']);
    assert.deepEqual(requests.map((r) => r.sessionId), [
        'proxy-operator:a.example:0', 'proxy-operator:a.example:1', 'proxy-operator:a.example:0', 'proxy-operator:b.example:0',
    ]);
    const pool = options.sessionPool;
    const first = await pool.getSession(requests[0].sessionId);
    assert.equal(first.proxyInfo.url, 'http://p1:pa%40ss@127.0.0.1:3128');
    assert.deepEqual([first.proxyInfo.username, first.proxyInfo.password], ['p1', 'pa@ss']);
    assert.equal(await pool.getSession(requests[2].sessionId), first, 'a pin keeps its session');
    assert.notEqual((await pool.getSession(requests[1].sessionId)).proxyInfo.url, first.proxyInfo.url);
    assert.equal(api.calls.find(([, p, b]) => p === '/v1/leases' && b.target === 'a.example')[2].target, 'a.example');
    await px.report({ session: first, request: request('https://a.example/1'), response: { status: 403 } });
    first.retire();
    const again = await pool.getSession(requests[0].sessionId);
    assert.notEqual(again, first);
    await settle(px);
    assert.ok(api.paths('DELETE').includes('/v1/leases/lease-1'));
    await px.close();
});

test('the status of a response: got and fetch keep it in a field, Playwright in a method', () => {
    assert.equal(statusOf({ statusCode: 429 }), 429);
    assert.equal(statusOf({ status: 403 }), 403);
    assert.equal(statusOf({ status: () => 200 }), 200);
    assert.equal(statusOf(undefined), undefined);
});

test('a browser crawler gets a context per page, and its browser no lease', async () => {
    const api = fakeApi();
    const px = helper(api);
    assert.throws(() => px.browserCrawlerOptions(crawlee3, { launchContext: { useIncognitoPages: false } }), /useIncognitoPages/);
    const mine = () => {};
    const options = px.browserCrawlerOptions(crawlee3, {
        launchContext: { launchOptions: { headless: true } },
        browserPoolOptions: { useFingerprints: false, prePageCreateHooks: [mine] },
    });
    assert.deepEqual(options.launchContext, {
        launchOptions: { handleSIGINT: false, handleSIGTERM: false, handleSIGHUP: false, headless: true },
        useIncognitoPages: true,
    });
    assert.deepEqual(options.browserPoolOptions, { useFingerprints: false, prePageCreateHooks: [credentialsInProxyUrl, mine] });
    assert.equal(await options.proxyConfiguration.newUrlFunction('s1'), null);
    assert.equal(api.paths('POST').length, 0);
    await px.close();
});

test('the sizing rule: sessions times sites at most half the places', async () => {
    const px = helper(fakeApi());
    assert.equal(await px.poolSize(2), 5, '5 proxies x 4 places / (2 x 2 sites)');
    assert.equal(await px.poolSize(40), 1);
});

test('plain Playwright: one context per lease, its proxy apart; a penalty closes it', async () => {
    const api = fakeApi();
    const px = helper(api);
    const browser = fakeBrowser();
    const { made } = browser;
    const contexts = px.browserContexts(browser, { contextOptions: { ignoreHTTPSErrors: true } });
    const [one, two] = await Promise.all([contexts.forUrl('https://a.example/1'), contexts.forUrl('https://a.example/2')]);
    assert.equal(one.context, two.context);
    assert.equal(made.length, 1);
    assert.deepEqual(made[0].options, { ignoreHTTPSErrors: true, proxy: { server: 'http://127.0.0.1:3128', username: 'p1', password: 'pa@ss' } });
    assert.deepEqual(made[0].guarded(), ['continue']);
    assert.equal(await contexts.judge(one, fakeResponse(200)), true);
    assert.equal(await contexts.judge(two, fakeResponse(429)), false);
    assert.deepEqual(made[0].guarded(), ['abort', 'blockedbyclient'], 'no request leaves through the proxy once the lease is dropped');
    assert.equal(made[0].closed, true);
    const three = await contexts.forUrl('https://a.example/3');
    assert.equal(three.context.options.proxy.username, 'p2');
    await contexts.close();
    assert.equal(made[1].closed, true);
    assert.deepEqual(api.paths('DELETE').sort(), ['/v1/leases/lease-1', '/v1/leases/lease-2', '/v1/leases?holder=test%2Fholder']);
});

test('plain Playwright: a 429 ends the proxy for the site as its status line comes, before its page loads', async () => {
    const api = fakeApi();
    const px = helper(api);
    const browser = fakeBrowser();
    const contexts = px.browserContexts(browser);
    const [one, two] = await Promise.all([contexts.forUrl('https://a.example/1'), contexts.forUrl('https://a.example/2')]);
    const context = browser.made[0];
    context.answer(403, { page: false });
    assert.deepEqual(context.guarded(), ['continue'], "a resource's 403 is not the page's answer");
    const answered = context.answer(429);
    assert.deepEqual(context.guarded(), ['abort', 'blockedbyclient'], 'no request leaves once the status line said 429, while the page still loads');
    assert.equal(await contexts.judge(one, answered), false);
    assert.equal(await contexts.judge(two, fakeResponse(200)), true, 'a page sent before is judged as usual');
    await settle(px);
    assert.deepEqual(api.reports().map(([path, body]) => [path, body.status]), [['/v1/leases/lease-1/report', 429], ['/v1/leases/lease-1/report', 200]],
        'the 429 reported once, as its status line came');
    assert.equal(context.closed, true);
    assert.equal((await contexts.forUrl('https://a.example/3')).proxy, 'crawl/p2');
    await contexts.close();
});

test('plain Playwright: a ban page ends the proxy for the site as its body comes, before it loads', async () => {
    const api = fakeApi();
    const px = helper(api);
    const browser = fakeBrowser();
    const contexts = px.browserContexts(browser, { isBlockedBody: (body) => body.includes('captcha') });
    const [one, two] = await Promise.all([contexts.forUrl('https://a.example/1'), contexts.forUrl('https://a.example/2')]);
    const context = browser.made[0];
    const good = context.answer(200, { body: 'a page' });
    const ban = context.answer(200, { body: 'a captcha' });
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(context.guarded(), ['abort', 'blockedbyclient'], 'no request leaves once the body was a ban page, while the page still loads');
    assert.equal(await contexts.judge(two, ban), false);
    assert.equal(await contexts.judge(one, good), true);
    await settle(px);
    assert.deepEqual(api.reports().map(([path, body]) => [path, body.result ?? body.status]), [['/v1/leases/lease-1/report', 'blocked'], ['/v1/leases/lease-1/report', 200]],
        'the ban reported once, as its body came; the good page once, when judged');
    await contexts.close();
});

test('plain Playwright: a body check that throws fails the page it judged, and nothing else', async () => {
    const api = fakeApi();
    const px = helper(api);
    const browser = fakeBrowser();
    const contexts = px.browserContexts(browser, { isBlockedBody: () => { throw new Error('the check broke'); } });
    const [one] = await Promise.all([contexts.forUrl('https://a.example/1'), contexts.forUrl('https://a.example/2')]);
    const context = browser.made[0];
    const judged = context.answer(200, { body: 'a page' });
    context.answer(200, { body: 'a page never judged' });
    await new Promise((resolve) => setImmediate(resolve));
    await assert.rejects(contexts.judge(one, judged), /the check broke/);
    assert.deepEqual(context.guarded(), ['continue']);
    await contexts.close();
});

test('plain Playwright: six pages at once in a context; the seventh waits for its lease, never inside the browser', async () => {
    const api = fakeApi();
    const px = helper(api);
    const contexts = px.browserContexts(fakeBrowser());
    const later = (promise) => {
        const seen = { leased: null };
        seen.done = promise.then((leased) => { seen.leased = leased; return leased; });
        return seen;
    };
    const tick = () => new Promise((resolve) => setTimeout(resolve, 20));
    const six = await Promise.all(Array.from({ length: 6 }, (_, n) => contexts.forUrl(`https://a.example/${n}`)));
    assert.equal(new Set(six.map((leased) => leased.context)).size, 1, 'one context on one lease');
    const seventh = later(contexts.forUrl('https://a.example/6'));
    await tick();
    assert.equal(seventh.leased, null, 'a seventh page waits while six are on their way');
    assert.equal(await contexts.judge(six[0], fakeResponse(200)), true);
    assert.equal((await seventh.done).context, six[0].context, 'a page judged frees its place');
    // A page waiting when the proxy is done for the site goes through the next lease.
    const eighth = later(contexts.forUrl('https://a.example/7'));
    await tick();
    assert.equal(eighth.leased, null);
    assert.equal(await contexts.judge(six[1], fakeResponse(429)), false);
    assert.equal((await eighth.done).proxy, 'crawl/p2', 'after a penalty the waiting page leases another proxy');
    await contexts.close();
    assert.equal(api.granted, 2);
});

test('plain Playwright: closing ends a wait for a place in a context', async () => {
    const api = fakeApi();
    const px = helper(api);
    const contexts = px.browserContexts(fakeBrowser(), { pagesPerContext: 1 });
    await contexts.forUrl('https://a.example/1');
    const waiting = contexts.forUrl('https://a.example/2');
    await contexts.close();
    await assert.rejects(waiting, { name: 'NoProxy' });
    assert.equal(api.granted, 1);
});

test('closing ends a wait on 409 at once and releases every lease, the holder\'s too', async () => {
    const api = fakeApi();
    const px = helper(api, { noMatchWaitMs: 60000 });
    await px.newUrlFunction('s1', { request: request('https://a.example/') });
    api.noMatch = 1000;
    const waiting = px.newUrlFunction('s1', { request: request('https://b.example/') });
    await new Promise((r) => setTimeout(r, 700));
    const started = Date.now();
    await px.close();
    await assert.rejects(waiting, /stopped while waiting/);
    assert.ok(Date.now() - started < 2000);
    assert.ok(api.paths('DELETE').includes('/v1/leases/lease-1'));
    assert.ok(api.paths('DELETE').includes('/v1/leases?holder=test%2Fholder'));
    assert.equal(api.active.size, 0);
});

test('run releases every lease when the crawler fails, and stops at once on SIGTERM', async () => {
    const api = fakeApi();
    const px = helper(api);
    const failing = { async run() {
        await px.newUrlFunction('s1', { request: request('https://a.example/') });
        throw new Error('a crawler error');
    } };
    await assert.rejects(px.run(failing, []), /a crawler error/);
    assert.equal(api.active.size, 0);

    const other = helper(api, { noMatchWaitMs: 60000 });
    let aborted = false;
    const waiting = {
        autoscaledPool: { abort: () => { aborted = true; } },
        async run() {
            await other.newUrlFunction('s1', { request: request('https://a.example/') });
            api.noMatch = 1000;
            setTimeout(() => process.emit('SIGTERM', 'SIGTERM'), 300);
            await assert.rejects(other.newUrlFunction('s1', { request: request('https://b.example/') }), /stopped/);
        },
    };
    await other.run(waiting, [], { exitOnSignal: false });
    assert.equal(aborted, true);
    assert.equal(other.signalled, 'SIGTERM');
    assert.equal(api.active.size, 0);
});

test('FakeSession keeps the semantics the helper relies on', () => {
    const session = new FakeSession();
    assert.equal(session.isUsable(), true);
    session.retire();
    assert.equal(session.isUsable(), false);
});

test('a browser crawler\'s relay gets the credentials encoded once, whatever the password holds', () => {
    const password = 'p@ss:/#%?+=&!*\'()';
    // As Crawlee 3.18.1 hands a page's proxy over: the lease's URL, its credentials decoded.
    const pageOptions = { proxy: { server: 'http://10.0.0.7:3128', username: 'crawl-a', password, bypass: 'x' } };
    credentialsInProxyUrl('page-1', null, pageOptions);
    assert.deepEqual(Object.keys(pageOptions.proxy), ['server', 'bypass']);
    // As the relay (proxy-chain) reads it: new URL, then decodeURIComponent once.
    const url = new URL(pageOptions.proxy.server);
    assert.equal(decodeURIComponent(url.password), password);
    assert.equal(decodeURIComponent(url.username), 'crawl-a');
    assert.equal(url.host, '10.0.0.7:3128');
    const bare = { proxy: { server: 'http://10.0.0.7:3128' } };
    credentialsInProxyUrl('page-2', null, bare);
    assert.deepEqual(bare, { proxy: { server: 'http://10.0.0.7:3128' } }, 'a proxy without credentials is left as it is');
});

test('a browser crawler\'s relay error is an error, never a page; a 597 leases again', async () => {
    const api = fakeApi();
    const px = helper(api);
    const seen = [];
    const options = px.browserCrawlerOptions(crawlee3, { requestHandler: async (ctx) => seen.push(ctx.request.url) });
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    const page = (status) => ({ session, request: req, response: { status: () => status } });
    await px.newUrlFunction('s1', { request: req });
    await assert.rejects(options.requestHandler(page(595)), /relay answered 595, not a page/);
    await px.newUrlFunction('s1', { request: req });
    await assert.rejects(options.requestHandler(page(597)), crawlee3.SessionError);
    assert.equal(await px.newUrlFunction('s1', { request: req }), 'http://p2:pa%40ss@127.0.0.1:3128', 'a 597: another lease');
    await settle(px);
    assert.deepEqual(seen, []);
    assert.deepEqual(api.reports(), [['/v1/leases/lease-1/report', { result: 'error', target: 'a.example' }]]);
    await px.close();
});

test('the book is the one clock: a proxy it grants again is used, and no penalty is told twice', async () => {
    // The operator's cooldown is short: after the 429 the book grants p1 again for the site.
    const api = fakeApi({ proxies: ['p1'] });
    api.cooldownMs = 0;
    const px = helper(api);
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await px.newUrlFunction('s1', { request: req });
    assert.equal((await px.report(context(session, req, 429))).leaseAgain, true);
    assert.equal(await px.newUrlFunction('s1', { request: req }), 'http://p1:pa%40ss@127.0.0.1:3128');
    await px.report(context(session, req, 200));
    await settle(px);
    assert.deepEqual(api.reports(), [
        ['/v1/leases/lease-1/report', { status: 429, target: 'a.example' }],
        ['/v1/leases/lease-2/report', { status: 200, target: 'a.example' }],
    ], 'each answer reported once, on the lease it came through');
    await px.close();
});

test('an answer that says the proxy cools down for the site drops its lease', async () => {
    const api = fakeApi();
    const px = helper(api);
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await px.newUrlFunction('s1', { request: req });
    api.cooling.set('p1 a.example', Date.now() + 60000); // another crawler's report
    assert.equal((await px.report(context(session, req, 200))).leaseAgain, false, 'the page is good');
    await settle(px);
    assert.equal(await px.newUrlFunction('s1', { request: req }), 'http://p2:pa%40ss@127.0.0.1:3128');
    assert.deepEqual(api.paths('DELETE'), ['/v1/leases/lease-1']);
    await px.close();
});

test('a penalty report is sent until it lands, with one report ID, before the next lease for the site', async () => {
    const api = fakeApi();
    const px = helper(api, { apiWaitMs: 200 });
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await px.newUrlFunction('s1', { request: req });
    api.unavailable = 8; // longer than the API wait: still sent, never dropped
    await px.report(context(session, req, 403));
    assert.equal(await px.newUrlFunction('s1', { request: req }), 'http://p2:pa%40ss@127.0.0.1:3128');
    const ids = api.reportIds('/v1/leases/lease-1/report');
    assert.equal(ids.length, 9);
    assert.equal(new Set(ids).size, 1, 'one report, sent until it landed');
    const lastReport = api.calls.findLastIndex(([, p]) => p === '/v1/leases/lease-1/report');
    assert.ok(lastReport < api.calls.findLastIndex(([, p]) => p === '/v1/leases'), 'landed before the next lease');
    assert.equal(px.stats.reportsLost, 0);
    // Sent again after its answer was lost, a report counts once.
    const call = px.discovery.reportStatusCall('lease-2', 429, 'a.example');
    const [first, again] = [await px.discovery.run(call), await px.discovery.run(call)];
    assert.deepEqual([first.repeated, again.repeated], [false, true]);
    await px.close();
});

test('on 409 it waits until the first proxy leaves its cooldown, and gives up at once past the wait', async () => {
    const api = fakeApi();
    const px = helper(api, { noMatchWaitMs: 5000 });
    api.noMatch = 1;
    api.noMatchBody = { considered: 2, atCapacity: 0, inCooldown: 2, unhealthy: 0, retryAfterSeconds: 1 };
    let started = Date.now();
    await px.newUrlFunction('s1', { request: request('https://a.example/') });
    const took = Date.now() - started;
    assert.ok(took >= 1000 && took < 1500, `${took} ms`);
    assert.equal(api.paths('POST').length, 2, 'asked once more, when the cooldown ended');
    api.noMatch = 1;
    api.noMatchBody = { ...api.noMatchBody, retryAfterSeconds: 1800 };
    started = Date.now();
    await assert.rejects(px.newUrlFunction('s1', { request: request('https://b.example/') }), /no proxy for b.example/);
    assert.ok(Date.now() - started < 500);
    await px.close();
});

test('the lease wait is added to Crawlee\'s handler timeout, and the crawler\'s handler keeps its own', async () => {
    const api = fakeApi();
    const px = helper(api, { noMatchWaitMs: 100000, apiWaitMs: 20000 });
    assert.equal(px.crawlerOptions(crawlee3, {}).requestHandlerTimeoutSecs, 60 + 120);
    const options = px.crawlerOptions(crawlee3, {
        requestHandlerTimeoutSecs: 0.2,
        requestHandler: () => new Promise((resolve) => setTimeout(resolve, 1000)),
    });
    assert.equal(options.requestHandlerTimeoutSecs, 0.2 + 120);
    const session = new FakeSession({ id: 's1' });
    const req = request('https://a.example/');
    await px.newUrlFunction('s1', { request: req });
    await assert.rejects(options.requestHandler(context(session, req, 200)), /requestHandler timed out after 0.2 seconds/);
    await px.close();
});

test('the types name every export of the package, and nothing else', async () => {
    const { readFileSync } = await import('node:fs');
    const declared = new Set(
        [...readFileSync(new URL('../src/index.d.ts', import.meta.url), 'utf8').matchAll(/^export (?:class|function|const) (\w+)/gm)].map(
            (m) => m[1],
        ),
    );
    const exported = new Set(Object.keys(await import('../src/index.js')));
    assert.deepEqual([...declared].sort(), [...exported].sort());
});
