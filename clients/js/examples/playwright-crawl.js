// A Playwright crawler (Node.js, no Crawlee) on proxy-operator's proxies: CRAWL_CONCURRENCY
// pages at once (default 8) in browser contexts on leased proxies, one context per lease,
// captcha pages told apart by a ban check. It prints one JSON line per page and a summary;
// the e2e tests (tests/tests/e2e/crawlers.rs) run it, and it is a working example of
// `px.browserContexts`.
//
//   PROXY_OPERATOR_URL=http://proxy-operator-discovery:8090 PROXY_OPERATOR_TOKEN=... \
//     CRAWL_URLS_FILE=urls.txt node playwright-crawl.js
//
// SIGINT and SIGTERM stop it (every lease released); CRAWL_FAIL_AFTER=N makes it fail after
// N pages (the tests' crawler error). It never calls process.exit: it ends when the crawl
// does. CHROMIUM names the browser (/usr/bin/chromium); Playwright comes from
// $PROXY_OPERATOR_CRAWLEE's node_modules, or from next to this package.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { join } from 'node:path';

import { CHROMIUM_ARGS, NoProxy, ProxyOperator, defaultHolder } from '../src/index.js';

const require = createRequire(
    process.env.PROXY_OPERATOR_CRAWLEE ? join(process.env.PROXY_OPERATOR_CRAWLEE, 'package.json') : import.meta.url,
);
const { chromium } = require('playwright');
const print = (line) => console.log(JSON.stringify(line));

const urls = readFileSync(process.env.CRAWL_URLS_FILE, 'utf8').split('\n').filter(Boolean);
const failAfter = Number(process.env.CRAWL_FAIL_AFTER ?? 0);
const px = new ProxyOperator({
    url: process.env.PROXY_OPERATOR_URL,
    token: process.env.PROXY_OPERATOR_TOKEN,
    holder: defaultHolder('playwright'),
});
// The crawler ends on SIGINT and SIGTERM (every lease released), not Playwright.
const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
    handleSIGINT: false,
    handleSIGTERM: false,
});
const contexts = px.browserContexts(browser, {
    contextOptions: { ignoreHTTPSErrors: true },
    // From the body as it arrives: the proxy is done for the site before the page loads.
    isBlockedBody: (body) => body.includes('id="captcha"'),
});

let stopped = null;
for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => {
        stopped = signal;
        px.keeper.closing = true; // every wait on the API ends at once
    });
}

/** One page, through as many leases as it takes. */
async function crawl(url, attempts = 20) {
    for (let attempt = 0; attempt < attempts && !stopped; attempt += 1) {
        const { leased, page } = await contexts.newPage(url);
        let response;
        let html;
        try {
            response = await page.goto(url, { timeout: 30000, waitUntil: 'domcontentloaded' });
            html = await page.content();
        } catch (error) {
            await page.close().catch(() => {});
            contexts.failed(leased);
            print({ event: 'retry', url, error: String(error.message).slice(0, 200) });
            continue;
        }
        const good = await contexts.judge(leased, response, page);
        await page.close().catch(() => {});
        if (good) {
            print({ event: 'page', url, status: response.status(), proxy: leased.proxy, marker: html.match(/page:[^<]+/)?.[0] ?? null });
            return true;
        }
    }
    if (!stopped) print({ event: 'failed', url });
    return false;
}

const queue = [...urls];
let pages = 0;
async function worker() {
    while (queue.length && !stopped) {
        if (await crawl(queue.shift())) {
            pages += 1;
            if (failAfter && pages >= failAfter) throw new Error(`failing after ${failAfter} pages, as asked`);
        }
    }
}

try {
    await Promise.all(Array.from({ length: Number(process.env.CRAWL_CONCURRENCY ?? 8) }, worker));
} catch (error) {
    if (!(error instanceof NoProxy && stopped)) {
        print({ event: 'error', error: String(error.message ?? error).slice(0, 300) });
        process.exitCode = 1;
    }
} finally {
    await contexts.close();
    await browser.close();
    print({ event: 'summary', pages, no_match: px.stats.noMatch, proxy_operator: px.stats });
}
if (stopped) process.exitCode = 128 + constants.signals[stopped];
