// A Crawlee HttpCrawler that crawls the URLs it is given through proxy-operator's proxies and
// prints one JSON line per page and a summary: the e2e test tests/tests/e2e/crawlers.rs runs
// it, and it is a working example of the helper.
//
//   PROXY_OPERATOR_URL=http://proxy-operator-discovery:8090 PROXY_OPERATOR_TOKEN=... \
//     node crawl.js https://a.example/ https://b.example/
//
// Crawlee comes from the node_modules next to this package, or from $PROXY_OPERATOR_CRAWLEE
// (the directory holding the test bed's node_modules).

import { createRequire } from 'node:module';
import { join } from 'node:path';

import { ProxyOperator } from '../src/index.js';

const require = createRequire(
    process.env.PROXY_OPERATOR_CRAWLEE ? join(process.env.PROXY_OPERATOR_CRAWLEE, 'package.json') : import.meta.url,
);
const { Configuration, HttpCrawler, ProxyConfiguration } = require('@crawlee/http');

const px = new ProxyOperator({
    url: process.env.PROXY_OPERATOR_URL,
    token: process.env.PROXY_OPERATOR_TOKEN,
    noMatchWaitMs: Number(process.env.PROXY_OPERATOR_NO_MATCH_WAIT_MS ?? 60000),
});
const print = (line) => console.log(JSON.stringify(line));
let failed = 0;

const crawler = new HttpCrawler(
    {
        proxyConfiguration: new ProxyConfiguration({ newUrlFunction: px.newUrlFunction }),
        maxConcurrency: 1,
        maxRequestRetries: 3,
        // Each session holds a lease per host: keep the pool as small as the crawl needs.
        sessionPoolOptions: { maxPoolSize: 1 },
        additionalMimeTypes: ['text/plain'],
        async requestHandler(ctx) {
            const proxy = [...px.leases.values()].find((lease) => lease.url === ctx.proxyInfo?.url)?.proxy;
            await px.report(ctx);
            print({ event: 'page', url: ctx.request.url, status: ctx.response.statusCode, proxy, body: String(ctx.body).slice(0, 40) });
        },
        async errorHandler(ctx, error) {
            await px.report(ctx, error);
        },
        async failedRequestHandler(ctx, error) {
            await px.report(ctx, error);
            failed += 1;
            print({ event: 'failed', url: ctx.request.url, error: String(error.message ?? error).slice(0, 200) });
        },
    },
    new Configuration({ persistStorage: false }),
);
px.releaseOnTeardown(crawler);
await crawler.run(process.argv.slice(2));
print({ event: 'summary', failed, proxy_operator: px.stats });
