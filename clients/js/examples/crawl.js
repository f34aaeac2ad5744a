// A Crawlee 3 crawler on proxy-operator's proxies, as a real crawl runs: 8 requests at once
// (CRAWL_CONCURRENCY), a session pool sized by the sizing rule (`px.poolSize`), captcha
// pages told apart by `isBlocked`. An HttpCrawler; with CRAWL_CHEERIO=1 a CheerioCrawler;
// with CRAWL_BROWSER=1 a PlaywrightCrawler driving Debian's chromium (CHROMIUM). It prints
// one JSON line per page and a summary; the e2e tests (tests/tests/e2e/crawlers.rs) run it,
// and it is a working example of the helper.
//
//   PROXY_OPERATOR_URL=http://proxy-operator-discovery:8090 PROXY_OPERATOR_TOKEN=... \
//     CRAWL_URLS_FILE=urls.txt node crawl.js
//
// SIGINT and SIGTERM stop it (every lease released); CRAWL_FAIL_AFTER=N makes it fail after
// N pages (the tests' crawler error). It never calls process.exit: once the crawl is over,
// nothing of the helper's or Crawlee's keeps it running. Crawlee comes from the
// node_modules next to this package, or from $PROXY_OPERATOR_CRAWLEE (the directory holding
// the test bed's).

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { join } from 'node:path';

import { CHROMIUM_ARGS, ProxyOperator } from '../src/index.js';

const require = createRequire(
    process.env.PROXY_OPERATOR_CRAWLEE ? join(process.env.PROXY_OPERATOR_CRAWLEE, 'package.json') : import.meta.url,
);
const browser = process.env.CRAWL_BROWSER === '1';
const cheerio = process.env.CRAWL_CHEERIO === '1';
const crawlee = require(browser ? '@crawlee/playwright' : cheerio ? '@crawlee/cheerio' : '@crawlee/http');
const print = (line) => console.log(JSON.stringify(line));

const urls = readFileSync(process.env.CRAWL_URLS_FILE, 'utf8').split('\n').filter(Boolean);
const failAfter = Number(process.env.CRAWL_FAIL_AFTER ?? 0);
const captcha = 'id="captcha"';
const bodyOf = async (ctx) => (browser ? ctx.page.content() : String(ctx.body));

const px = new ProxyOperator({
    url: process.env.PROXY_OPERATOR_URL,
    token: process.env.PROXY_OPERATOR_TOKEN,
    isBlocked: async (ctx) => (await bodyOf(ctx)).includes(captcha),
});
const sites = new Set(urls.map((url) => new URL(url).hostname)).size;
let pages = 0;
let failed = 0;

const options = {
    maxConcurrency: Number(process.env.CRAWL_CONCURRENCY ?? 8),
    maxRequestRetries: 5,
    maxSessionRotations: 20,
    // The sizing rule: sessions x sites <= half of the fleet's places.
    sessionPoolOptions: { maxPoolSize: await px.poolSize(sites) },
    async requestHandler(ctx) {
        const marker = (await bodyOf(ctx)).match(/page:[^<]+/)?.[0] ?? null;
        pages += 1;
        const status = browser ? ctx.response.status() : ctx.response.statusCode;
        print({ event: 'page', url: ctx.request.url, status, proxy: ctx.proxyInfo?.hostname, marker });
        if (failAfter && pages >= failAfter) throw new crawlee.CriticalError(`failing after ${failAfter} pages, as asked`);
    },
    async failedRequestHandler(ctx, error) {
        failed += 1;
        print({ event: 'failed', url: ctx.request.url, error: String(error.message ?? error).slice(0, 200) });
    },
};
const config = new crawlee.Configuration({ persistStorage: false });
let crawler;
if (browser) {
    crawler = new crawlee.PlaywrightCrawler(
        px.browserCrawlerOptions(crawlee, {
            ...options,
            headless: true,
            launchContext: {
                launcher: require('playwright').chromium,
                launchOptions: { executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: [...CHROMIUM_ARGS, '--ignore-certificate-errors'] },
            },
            browserPoolOptions: { useFingerprints: false },
        }),
        config,
    );
} else if (cheerio) {
    crawler = new crawlee.CheerioCrawler(px.crawlerOptions(crawlee, { ...options, additionalMimeTypes: ['text/plain'] }), config);
} else {
    crawler = new crawlee.HttpCrawler(px.crawlerOptions(crawlee, { ...options, additionalMimeTypes: ['text/plain'] }), config);
}

try {
    await px.run(crawler, urls, { exitOnSignal: false });
} catch (error) {
    print({ event: 'error', error: String(error.message ?? error).slice(0, 300) });
    process.exitCode = 1;
} finally {
    print({ event: 'summary', pages, failed, no_match: px.stats.noMatch, proxy_operator: px.stats });
}
if (px.signalled) process.exitCode = 128 + constants.signals[px.signalled];
