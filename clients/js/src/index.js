// Crawlee and Playwright on proxy-operator's proxies (docs/api.md). No dependencies: HTTP
// with the global fetch (Node.js 20); Crawlee and Playwright are the caller's.
//
//   import * as crawlee from 'crawlee';          // or '@crawlee/http', '@crawlee/playwright'
//   const px = new ProxyOperator({ url, token, isBlocked });
//   const crawler = new crawlee.HttpCrawler(px.crawlerOptions(crawlee, { requestHandler, ... }));
//   await px.run(crawler, urls);                 // every lease released, however it ends
//
// Plain Playwright: `px.browserContexts(browser)` (playwright.js).

import { constants } from 'node:os';

import { ApiError, Backoff, Discovery, Stopped, Unavailable, defaultHolder } from './api.js';
import { CrawleeLeases, LeaseSessionPool, isCrawlee4, statusOf } from './crawlee.js';
import { LEASE_AGAIN, LeaseKeeper, NoProxy } from './leases.js';
import { LeasedContexts } from './playwright.js';

export { ApiError, Backoff, Discovery, defaultHolder, LEASE_AGAIN, LeaseKeeper, LeaseSessionPool, LeasedContexts, NoProxy, Stopped, Unavailable, isCrawlee4, statusOf };

/** Chromium's flags for a headless browser in a closed network (no background calls home). */
export const CHROMIUM_ARGS = Object.freeze([
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
]);

/**
 * Crawlee's `prePageCreateHooks` hook: a page's proxy as one URL whose credentials are
 * percent-encoded once, for the relay of an incognito context (see `browserCrawlerOptions`).
 */
export function credentialsInProxyUrl(_pageId, _controller, pageOptions) {
    const proxy = pageOptions?.proxy;
    if (!proxy?.server || (!proxy.username && !proxy.password)) return;
    const url = new URL(proxy.server);
    const encode = (text) => encodeURIComponent(text ?? '').replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
    const server = `${url.protocol}//${encode(proxy.username)}:${encode(proxy.password)}@${url.host}`;
    pageOptions.proxy = { server, bypass: proxy.bypass };
}

export class ProxyOperator {
    /**
     * @param {object} options
     * @param {string} options.url the discovery API, `http://proxy-operator-discovery:8090`
     * @param {string} [options.token] its bearer token
     * @param {Record<string, string>} [options.selector] label terms the proxies must carry
     * @param {number} [options.ttlSeconds] lease duration (300); a lease ending within
     *   `renewMarginMs` (5000) is replaced before it is handed out
     * @param {number} [options.noMatchWaitMs] how long a request waits for a proxy on 409 (300000,
     *   the operator's default rate-limit cooldown): until the first proxy cooling down for
     *   the site is free, as the answer says (given up at once when that is later), polling
     *   with a backoff while proxies at capacity may free a place
     * @param {number} [options.apiWaitMs] how long one call is retried while the API is away (60000)
     * @param {string} [options.holder] the name every lease carries (`crawlee/<host>/<pid>`)
     * @param {(context) => boolean | Promise<boolean>} [options.isBlocked] whether a page
     *   answered 2xx is a ban page (a captcha): reported blocked, once, and tried again
     * @param {number} [options.maxSessions] the session pool's `maxPoolSize` when the crawler
     *   sets none (10; see the sizing rule in the README and `poolSize`)
     * @param {number} [options.sessionsPerSite] Crawlee 4: sessions per site that `pin` and
     *   `requests` spread a site's requests over (2)
     * @param {typeof fetch} [options.fetch] for tests
     */
    constructor({
        url,
        token,
        selector = {},
        ttlSeconds = 300,
        renewMarginMs = 5000,
        noMatchWaitMs = 300000,
        apiWaitMs = 60000,
        holder,
        isBlocked,
        maxSessions = 10,
        sessionsPerSite = 2,
        fetch,
    }) {
        this.discovery = new Discovery({ url, token, apiWaitMs, holder: holder ?? undefined, fetch });
        if (!holder) this.discovery.holder = this.discovery.holder.replace(/^node\//, 'crawlee/');
        this.selector = selector;
        this.isBlocked = isBlocked;
        this.maxSessions = maxSessions;
        this.sessionsPerSite = Math.max(1, sessionsPerSite);
        this.keeper = new LeaseKeeper(this.discovery, { selector, ttlSeconds, renewMarginMs, noMatchWaitMs });
        this.crawlee = new CrawleeLeases(this);
        this.newUrlFunction = (sessionId, options) => this.crawlee.newUrl(sessionId, options);
    }

    /** What the helper did: leases, releases, reports by result, waits on 409, API retries. */
    get stats() {
        return { ...this.keeper.stats, apiRetries: this.discovery.retries };
    }

    /**
     * Options for an HTTP crawler (HttpCrawler, CheerioCrawler, JSDOMCrawler) of `crawlee`
     * (the module it comes from): lease-backed sessions, and `requestHandler`,
     * `errorHandler` and `failedRequestHandler` that report first. Crawlee 3 or 4, told
     * apart by `crawlee`.
     */
    crawlerOptions(crawlee, options = {}) {
        const size = options.sessionPoolOptions?.maxPoolSize ?? this.maxSessions;
        return isCrawlee4(crawlee) ? this.crawlee.options4(crawlee, options, size) : this.crawlee.options3(crawlee, options, size);
    }

    /**
     * Options for a browser crawler (PlaywrightCrawler, PuppeteerCrawler): as
     * `crawlerOptions`, with a browser context per page (`useIncognitoPages`), so that a
     * page's proxy is its lease's and never the one the browser was launched with, and
     * without Playwright's signal handlers (`run` ends the crawl on SIGINT and SIGTERM).
     *
     * Any password works: Crawlee 3 puts a local relay (proxy-chain) between each incognito
     * context and its proxy, and hands it the password decoded and set back through WHATWG
     * URL, which leaves a `%` as it is; the relay then decodes it once more, and the proxy
     * refuses the password (597). A `prePageCreateHooks` hook gives the relay the proxy's URL
     * with its credentials percent-encoded once, as the lease answer has them, and the relay
     * decodes them once. A relay error (590 to 599) is an error, never a page.
     */
    browserCrawlerOptions(crawlee, options = {}) {
        if (options.launchContext?.useIncognitoPages === false) {
            throw new Error('proxy-operator: a browser crawler needs useIncognitoPages (a context per page on its own lease)');
        }
        // The crawler ends on SIGINT and SIGTERM, not the browser: Playwright's own handlers
        // would close it and exit the process before any lease is released.
        const launchOptions = { handleSIGINT: false, handleSIGTERM: false, handleSIGHUP: false, ...options.launchContext?.launchOptions };
        const launchContext = { ...options.launchContext, launchOptions, useIncognitoPages: true };
        const browserPoolOptions = {
            ...options.browserPoolOptions,
            prePageCreateHooks: [credentialsInProxyUrl, ...(options.browserPoolOptions?.prePageCreateHooks ?? [])],
        };
        this.crawlee.browser = true;
        return this.crawlerOptions(crawlee, { ...options, launchContext, browserPoolOptions });
    }

    /** Crawlee 4: the session ID that pins a request for `url` to one of its site's sessions. */
    pin(url) {
        return this.crawlee.pin(url);
    }

    /** Crawlee 4: `urls` as requests pinned to their sites' sessions (Crawlee 3 takes them as they are). */
    requests(urls) {
        return urls.map((url) => ({ url, sessionId: this.pin(url) }));
    }

    /**
     * The sizing rule: the most sessions a crawl of `sites` sites should keep, so that their
     * leases (one per session and site) take at most half of the places (`maxLeases`) of the
     * healthy proxies the selector takes, and the other half stays for the proxies a site
     * sends into cooldown.
     */
    async poolSize(sites) {
        const selector = Object.entries(this.selector).map(([k, v]) => `${k}=${v}`).join(',');
        const query = new URLSearchParams({ healthy: 'true', selector, fields: 'maxLeases' });
        const listed = await this.discovery.run({ method: 'GET', path: `/v1/proxies?${query}` });
        const places = (listed.proxies ?? []).reduce((sum, p) => sum + (p.maxLeases ?? 0), 0);
        return Math.max(1, Math.floor(places / (2 * Math.max(1, sites))));
    }

    /** Reports what a crawling context saw (see crawlee.js); for crawlers not built with `crawlerOptions`. */
    async report(context, error) {
        return this.crawlee.report(context, error);
    }

    /**
     * Runs the crawler, and releases every lease when it ends, however it ends: finished,
     * failed (the error is thrown on), or stopped by SIGINT or SIGTERM, which end every wait
     * on the API at once and then exit the process with 128 + the signal's number.
     */
    async run(crawler, requests, { exitOnSignal = true } = {}) {
        let signalled = null;
        const stop = (signal) => {
            if (signalled) return;
            signalled = signal;
            this.signalled = signal;
            this.keeper.closing = true; // ends every wait on the API and on 409 at once
            crawler.autoscaledPool?.abort?.();
            crawler.stop?.(`proxy-operator: ${signal}`);
        };
        const signals = ['SIGINT', 'SIGTERM'];
        for (const signal of signals) process.on(signal, stop);
        try {
            return await crawler.run(requests);
        } finally {
            for (const signal of signals) process.off(signal, stop);
            await this.close();
            if (signalled && exitOnSignal) process.exit(128 + constants.signals[signalled]);
        }
    }

    /** Releases every lease held, then every lease of the holder. */
    async close() {
        this.crawlee.close();
        return this.keeper.close();
    }

    /** Releases every lease held (kept from 0.1: `close`). */
    async releaseAll() {
        return this.close();
    }

    /** Releases every lease when the crawler tears down (at the end of `crawler.run()`); `run` does this and more. */
    releaseOnTeardown(crawler) {
        const teardown = crawler.teardown.bind(crawler);
        crawler.teardown = async (...args) => {
            await this.close();
            return teardown(...args);
        };
        return crawler;
    }

    /** Browser contexts of a Playwright `browser` on leased proxies, one per lease (playwright.js). */
    browserContexts(browser, options = {}) {
        return new LeasedContexts(browser, this, options);
    }
}
