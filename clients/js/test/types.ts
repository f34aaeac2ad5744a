// Every export of the package used as the README uses it, for `tsc --noEmit` to check the
// types (src/index.d.ts) against; never run. tests/tests/shims.rs runs tsc on it, and
// `the types name every export` (proxy-operator.test.js) checks that they name what
// src/index.js exports.

import {
    ApiError,
    Backoff,
    CHROMIUM_ARGS,
    Discovery,
    LEASE_AGAIN,
    LeaseKeeper,
    LeaseSessionPool,
    LeasedContexts,
    NoProxy,
    ProxyOperator,
    Stopped,
    Unavailable,
    credentialsInProxyUrl,
    defaultHolder,
    isCrawlee4,
    statusOf,
} from '../src/index.js';
import type { Reported, Verdict } from '../src/index.js';

declare const crawlee: unknown;
declare const browser: unknown;

export async function readme(): Promise<number> {
    const px = new ProxyOperator({
        url: 'http://proxy-operator-discovery:8090',
        token: 't0ken',
        selector: { geo: 'eu' },
        isBlocked: async (ctx) => String(ctx.body).includes('captcha'),
    });
    const options = px.crawlerOptions(crawlee, {
        maxConcurrency: 8,
        sessionPoolOptions: { maxPoolSize: await px.poolSize(3) },
        async requestHandler() {},
    });
    const timeout: number = options.requestHandlerTimeoutSecs;
    const browserOptions = px.browserCrawlerOptions(crawlee, { launchContext: { launchOptions: { headless: true } } });
    const crawler = { run: async (urls?: string[]) => ({ requestsFinished: urls?.length ?? 0 }) };
    const finished = await px.run(crawler, ['https://shop.example/'], { exitOnSignal: false });
    const verdict: Verdict | null = await px.report({});
    const contexts: LeasedContexts = px.browserContexts(browser, { contextOptions: {}, leasesPerSite: 1, isBlockedBody: (body: string) => body.includes('captcha') });
    const { leased, page } = await contexts.newPage('https://shop.example/');
    const good: boolean = await contexts.judge(leased, page);
    contexts.failed(leased);
    await contexts.close();
    await px.close();
    const wait: number = px.keeper.leaseWaitMs;
    const stats = px.stats;
    return timeout + finished.requestsFinished + wait + stats.apiRetries + Number(good) + Number(verdict?.leaseAgain)
        + Number(browserOptions === undefined);
}

export async function lower(): Promise<void> {
    const discovery = new Discovery({ url: 'http://discovery:8090', holder: defaultHolder('mine') });
    const keeper = new LeaseKeeper(discovery, { noMatchWaitMs: 1000 });
    const held = await keeper.acquire('slot', 'shop.example');
    await keeper.penalise(held, discovery.reportStatusCall(held.lease.id, 429, held.host));
    const answer: Reported = await discovery.run(discovery.reportResultCall(held.lease.id, 'blocked'));
    const backoff = new Backoff(1000).delay(answer.cooldownSeconds ?? undefined);
    const error = new ApiError(409, { error: 'no_match', retryAfterSeconds: 3 });
    const waits: (number | null | undefined)[] = [backoff, error.retryAfterMs, statusOf({ status: 200 })];
    const classes = [Unavailable, Stopped, NoProxy, LeaseSessionPool];
    const flags: boolean[] = [isCrawlee4(crawlee), error.onlyCooling, CHROMIUM_ARGS.length > 0, LEASE_AGAIN[429] === 'rate_limited'];
    credentialsInProxyUrl('page', null, { proxy: { server: 'http://10.0.0.7:3128', username: 'u', password: 'p' } });
    void [waits, classes, flags];
}
