// Playwright browser contexts on leased proxies, for a crawler written on Playwright alone:
// one context per lease, its proxy given to the context as Playwright takes it (server,
// username and password apart: Chromium takes no credentials in a proxy URL).
//
//   const contexts = px.browserContexts(browser, { contextOptions, leasesPerSite, isBlockedBody });
//   const { leased, page } = await contexts.newPage(url);
//   const response = await page.goto(url);
//   if (await contexts.judge(leased, response, page)) { /* the page is good */ }
//   else { /* its proxy is done for the site: forUrl again */ }
//   await contexts.close();   // every context closed, every lease released
//
// `judge` reports the page's response status (a page `isBlocked` recognises as blocked,
// once) and after a 429, 401, 403, 407 or a ban page drops the lease (see leases.js): no
// page is opened on it again, no request leaves through its context any more, and the
// context closes once the pages already on their way through it are judged.
//
// A 429, 401, 403 or 407 is acted on as soon as its status line reaches the browser (the
// context's `response` event), and a ban page as soon as its body has (`isBlockedBody`), not
// when the crawler's `goto` returns: the page must first load, in a renderer a busy machine
// starts seconds later, and meanwhile the other pages on the lease kept going to a site that
// had said no. `judge` then finds that answer reported. (`isBlocked`, which reads the page,
// can only run once it loaded.)
//
// A context has at most `pagesPerContext` pages at once (6): Chromium opens at most six
// connections to one site through one proxy, and a seventh request, once the context's
// guard let it go, would wait inside the browser for a connection to free, where a penalty
// can no longer stop it (it reached the site seconds after the crawler knew the proxy was
// done for it). A page past the bound waits for its lease here instead.

import { LEASE_AGAIN } from './leases.js';
import { hostOf } from './crawlee.js';

/** The connections Chromium opens at most to one site (host and port) through one proxy. */
const CHROMIUM_CONNECTIONS_PER_SITE = 6;

export class LeasedContexts {
    /**
     * @param {import('playwright').Browser} browser
     * @param {import('./index.js').ProxyOperator} px
     * @param {object} [options]
     * @param {object} [options.contextOptions] for `browser.newContext`, besides `proxy`
     * @param {number} [options.leasesPerSite] leases at once per site (1)
     * @param {number} [options.pagesPerContext] pages at once in one context (6: the
     *   connections Chromium opens to one site through one proxy)
     * @param {(page, response) => boolean | Promise<boolean>} [options.isBlocked] whether a
     *   page answered 2xx is a ban page, from the page once it loaded
     * @param {(body: string, response) => boolean | Promise<boolean>} [options.isBlockedBody]
     *   whether a page answered 2xx is a ban page, from its body as soon as it arrived
     */
    constructor(browser, px, { contextOptions = {}, leasesPerSite = 1, pagesPerContext = CHROMIUM_CONNECTIONS_PER_SITE, isBlocked, isBlockedBody } = {}) {
        this.browser = browser;
        this.px = px;
        this.keeper = px.keeper;
        this.contextOptions = contextOptions;
        this.leasesPerSite = leasesPerSite;
        this.pagesPerContext = Math.max(1, pagesPerContext);
        this.isBlocked = isBlocked;
        this.isBlockedBody = isBlockedBody;
        this.opening = new Map();
        this.closing = new Set();
        /** Verdicts on a response as it came, by its request (true: penalised, and reported): `judge` awaits them, never reports a penalty again. */
        this.early = new WeakMap();
        this.onDrop = (held) => this.#closeContext(held);
        this.keeper.dropListeners.add(this.onDrop);
    }

    /**
     * A new page for `url` in a context on a live lease for its host: should the lease be
     * dropped while the page opens (another page's penalty), the page is closed and another
     * lease taken, so that no navigation starts on a proxy known to be done for the site.
     */
    async newPage(url) {
        for (;;) {
            const leased = await this.forUrl(url);
            let page;
            try {
                page = await leased.context.newPage();
            } catch (error) {
                this.#done(leased);
                if (!leased.held.dropped) throw error;
                continue; // its context closed under it: the lease is gone
            }
            if (!leased.held.dropped) return { leased, page };
            await page.close().catch(() => {});
            this.#done(leased);
        }
    }

    /** A context on a lease for the URL's host (shared by the callers using that lease). */
    async forUrl(url) {
        const host = hostOf(url);
        const held = await this.keeper.acquire(`page ${host}`, host, this.leasesPerSite, this.pagesPerContext);
        if (!held.extra) {
            // One context per lease: the first caller opens it, the others wait for it.
            if (!this.opening.has(held.lease.id)) this.opening.set(held.lease.id, this.#open(held));
            await this.opening.get(held.lease.id);
        }
        return { held, context: held.extra, proxy: held.lease.proxy };
    }

    async #open(held) {
        const { server, username, password } = held.lease;
        const proxy = { server, ...(username ? { username } : {}), ...(password ? { password } : {}) };
        const context = await this.browser.newContext({ ...this.contextOptions, proxy });
        if (held.dropped) {
            await context.close().catch(() => {});
            return;
        }
        // A page opened on the lease before it was dropped may start its navigation after (a
        // busy browser takes seconds): no request leaves through a proxy the crawler knows is
        // done for the site. What was already sent comes back and is judged as usual.
        await context.route('**/*', (route) => (held.dropped ? route.abort('blockedbyclient') : route.continue()));
        context.on('response', (response) => this.#statusLine(held, response));
        held.extra = context;
    }

    /**
     * A page's answer as its status line arrives: a 429, 401, 403 or 407 ends the proxy for
     * the site at once; a 2xx does once its body has arrived, if `isBlockedBody` calls it a
     * ban page.
     */
    #statusLine(held, response) {
        if (!isPage(response)) return;
        const status = response.status();
        const { discovery } = this.keeper;
        const { id } = held.lease;
        let verdict;
        if (status in LEASE_AGAIN) {
            verdict = this.keeper.penalise(held, discovery.reportStatusCall(id, status, held.host)).then(() => true);
        } else if (status >= 200 && status < 300 && this.isBlockedBody) {
            verdict = this.#banned(response).then(async (banned) => {
                if (banned) await this.keeper.penalise(held, discovery.reportResultCall(id, 'blocked', held.host));
                return banned;
            });
        } else {
            return;
        }
        // A check that throws fails the page's `judge`; a page never judged (its goto
        // failed) must not end the process with an unhandled rejection.
        verdict.catch(() => {});
        this.early.set(response.request(), verdict);
    }

    /** Whether `isBlockedBody` calls the response's body a ban page (no body: not one). */
    async #banned(response) {
        let body;
        try {
            body = await response.text();
        } catch {
            return false; // the page went before its body came
        }
        return Boolean(await this.isBlockedBody(body, response));
    }

    /**
     * Reports what the page got through its lease and says whether the page is good; false
     * when its proxy is done for the site (the lease is gone: `forUrl` again). A navigation
     * without a response counts as an error.
     */
    async judge(leased, response, page) {
        try {
            return await this.#judge(leased.held, response, page);
        } finally {
            this.#done(leased); // after the checks, which may read the page
        }
    }

    async #judge(held, response, page) {
        const { discovery } = this.keeper;
        const { id } = held.lease;
        if (!response) {
            this.keeper.reportInBackground(held, discovery.reportResultCall(id, 'error', held.host));
            return false;
        }
        const early = this.early.get(response.request());
        if (early && (await early)) return false; // penalised, and reported, as it came
        const status = response.status();
        const banned = status >= 200 && status < 300 && this.isBlocked && (await this.isBlocked(page, response));
        if (banned) {
            await this.keeper.penalise(held, discovery.reportResultCall(id, 'blocked', held.host));
            return false;
        }
        if (status in LEASE_AGAIN) {
            await this.keeper.penalise(held, discovery.reportStatusCall(id, status, held.host));
            return false;
        }
        this.keeper.reportInBackground(held, discovery.reportStatusCall(id, status, held.host));
        return true;
    }

    /** A navigation through the lease failed without a response (a timeout, a reset). */
    failed(leased) {
        const held = this.#done(leased);
        this.keeper.reportInBackground(held, this.keeper.discovery.reportResultCall(held.lease.id, 'error', held.host));
    }

    /** Closes every context, and releases every lease (the holder's too). */
    async close() {
        await this.px.close();
        for (const held of this.keeper.known.values()) {
            held.inFlight = 0; // whatever is still on its way ends with its context
            this.#closeContext(held);
        }
        await Promise.allSettled([...this.closing]);
        this.keeper.dropListeners.delete(this.onDrop);
    }

    /** The lease a page went through, no longer counting it; a dropped lease's context closes with its last page. */
    #done(leased) {
        const held = this.keeper.done(leased.held.lease.id) ?? leased.held;
        if (held.dropped && held.inFlight === 0) this.#closeContext(held);
        return held;
    }

    #closeContext(held) {
        const context = held.extra;
        if (!context || typeof context.close !== 'function' || held.inFlight > 0) return;
        held.extra = undefined;
        const closing = context.close().catch(() => {}).finally(() => this.closing.delete(closing));
        this.closing.add(closing);
    }
}

/** Whether `response` answers a page's own navigation (its main frame), which `judge` is given. */
function isPage(response) {
    try {
        const request = response.request();
        return request.isNavigationRequest() && request.frame().parentFrame() === null;
    } catch {
        return false; // a service worker's request has no frame
    }
}
