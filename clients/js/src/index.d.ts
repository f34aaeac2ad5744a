// Types of proxy-operator-client (src/index.js). Crawlee and Playwright are the caller's:
// their objects are typed loosely here, so that this package needs neither to type-check.
// `test/types.ts` uses every export as the README does, and `tsc --noEmit` checks it.

/** A call of the discovery API. */
export interface Call {
    method: 'GET' | 'POST' | 'DELETE';
    path: string;
    body?: Record<string, unknown>;
}

/** The answer to a report (docs/api.md, Report). */
export interface Reported {
    result: 'ok' | 'rate_limited' | 'blocked' | 'error' | null;
    leaseAgain: boolean;
    target: string | null;
    cooldownUntil: string | null;
    cooldownSeconds: number | null;
    repeated: boolean;
}

/** An error answer of the discovery API: `status` and the `code` of its JSON body. */
export class ApiError extends Error {
    constructor(status: number, body?: { error?: string; message?: string; [key: string]: unknown });
    status: number;
    code: string | undefined;
    body: Record<string, unknown> | undefined;
    /** On a 409: milliseconds until the first proxy cooling down for the target is free. */
    get retryAfterMs(): number | undefined;
    /** On a 409: whether only cooldowns stand in the way. */
    get onlyCooling(): boolean;
}

/** The API did not answer within `apiWaitMs` (network errors, timeouts, 5xx). */
export class Unavailable extends ApiError {}

/** The caller is stopping: a call that may be dropped was not retried further. */
export class Stopped extends Error {}

/** No lease for a host: none fitted within the wait, the API was away, or the crawler is stopping. */
export class NoProxy extends Error {}

/** Exponential backoff with full jitter, or the answer's Retry-After, within a bound. */
export class Backoff {
    constructor(boundMs: number, options?: { firstMs?: number; capMs?: number; now?: () => number; random?: () => number });
    retries: number;
    /** How long to wait before the next attempt, or null when the bound is spent. */
    delay(retryAfterMs?: number): number | null;
}

export interface DiscoveryOptions {
    /** The discovery API, `http://proxy-operator-discovery:8090`. */
    url: string;
    token?: string;
    /** How long one call is retried while the API is away (60000). */
    apiWaitMs?: number;
    /** One attempt's bound (10000). */
    timeoutMs?: number;
    /** The name every lease carries (`node/<host>/<pid>`). */
    holder?: string;
    fetch?: typeof fetch;
}

/** The discovery API at `url`. */
export class Discovery {
    constructor(options: DiscoveryOptions);
    base: string;
    holder: string;
    apiWaitMs: number;
    retries: number;
    leaseCall(target: string | undefined, selector: Record<string, string> | undefined, ttlSeconds: number): Call;
    reportStatusCall(leaseId: string, status: number, target?: string): Call;
    reportResultCall(leaseId: string, result: 'ok' | 'rate_limited' | 'blocked' | 'error', target?: string): Call;
    releaseCall(leaseId: string): Call;
    releaseHeldCall(): Call;
    run(call: Call, options?: { droppable?: boolean; stopping?: () => boolean; boundMs?: number }): Promise<any>;
    sleep(ms: number, options?: { droppable?: boolean; stopping?: () => boolean }): Promise<void>;
}

/** `<library>/<host name>/<process id>`, in the characters a holder may have. */
export function defaultHolder(library: string): string;

/** What the server's table says of a status, for the ones after which a crawler leases again. */
export const LEASE_AGAIN: Readonly<Record<number, 'rate_limited' | 'blocked' | null>>;

/** A granted lease as the helpers use it. */
export interface Lease {
    id: string;
    url: string;
    proxy: string;
    server: string;
    hostname: string;
    port: number;
    username?: string;
    password?: string;
    target: string;
    expiresAt: number;
}

/** A lease held for a host. */
export interface Held {
    lease: Lease;
    host: string;
    slot: string;
    inFlight: number;
    dropped: boolean;
    extra: unknown;
}

export interface LeaseKeeperStats {
    leases: number;
    releases: number;
    noMatch: number;
    leaseAgain: number;
    reports: Record<string, number>;
    reportsRepeated: number;
    reportsLost: number;
    releasedByHolder: number;
}

/** The leases of a crawler (src/leases.js). */
export class LeaseKeeper {
    constructor(
        discovery: Discovery,
        options?: { selector?: Record<string, string>; ttlSeconds?: number; renewMarginMs?: number; leasesPerSlot?: number; noMatchWaitMs?: number },
    );
    discovery: Discovery;
    stats: LeaseKeeperStats;
    closing: boolean;
    /** The longest a request waits for a lease: `noMatchWaitMs` plus `apiWaitMs`. */
    get leaseWaitMs(): number;
    acquire(slot: string, host: string, most?: number, perLease?: number): Promise<Held>;
    done(leaseId: string): Held | undefined;
    penalise(held: Held, call: Call | null): Promise<void>;
    reportInBackground(held: Held, call: Call): void;
    release(held: Held): Promise<void>;
    close(): Promise<boolean>;
}

/** A lease and the browser context on its proxy. */
export interface Leased {
    held: Held;
    context: any;
    proxy: string;
}

/** Playwright browser contexts on leased proxies (src/playwright.js). */
export class LeasedContexts {
    constructor(browser: any, px: ProxyOperator, options?: LeasedContextsOptions);
    newPage(url: string): Promise<{ leased: Leased; page: any }>;
    forUrl(url: string): Promise<Leased>;
    judge(leased: Leased, response: any, page?: any): Promise<boolean>;
    failed(leased: Leased): void;
    close(): Promise<void>;
}

export interface LeasedContextsOptions {
    /** For `browser.newContext`, besides `proxy`. */
    contextOptions?: Record<string, unknown>;
    /** Leases at once per site (1). */
    leasesPerSite?: number;
    /** Pages at once in one context (6: the connections Chromium opens to one site through one proxy); a page past it waits for its lease. */
    pagesPerContext?: number;
    /** Whether a page answered 2xx is a ban page, from the page once it loaded. */
    isBlocked?: (page: any, response: any) => boolean | Promise<boolean>;
    /** Whether a page answered 2xx is a ban page, from its body as soon as it arrived: the proxy is done for the site before the page loads. */
    isBlockedBody?: (body: string, response: any) => boolean | Promise<boolean>;
}

/** Crawlee 4's session pool on leases (untested: no Crawlee 4 release was available). */
export class LeaseSessionPool {
    getSession(sessionId?: string): Promise<any>;
}

/** Whether `crawlee` (the module the crawler comes from) is Crawlee 4. */
export function isCrawlee4(crawlee: unknown): boolean;

/** The status of a crawling context's response: a field (got, fetch) or a method (Playwright). */
export function statusOf(response: unknown): number | undefined;

/** Crawlee's `prePageCreateHooks` hook that hands an incognito page's relay its proxy URL. */
export function credentialsInProxyUrl(pageId: string, controller: unknown, pageOptions: { proxy?: { server?: string; username?: string; password?: string; bypass?: string } } | undefined): void;

/** Chromium's flags for a headless browser in a closed network. */
export const CHROMIUM_ARGS: readonly string[];

export interface ProxyOperatorOptions {
    /** The discovery API, `http://proxy-operator-discovery:8090`. */
    url: string;
    token?: string;
    /** Label terms the proxies must carry. */
    selector?: Record<string, string>;
    /** Lease duration (300); a lease ending within `renewMarginMs` (5000) is replaced. */
    ttlSeconds?: number;
    renewMarginMs?: number;
    /** How long a request waits for a proxy on 409 (300000). */
    noMatchWaitMs?: number;
    /** How long one call is retried while the API is away (60000). */
    apiWaitMs?: number;
    /** The name every lease carries (`crawlee/<host>/<pid>`). */
    holder?: string;
    /** Whether a page answered 2xx is a ban page (a captcha). */
    isBlocked?: (context: any) => boolean | Promise<boolean>;
    /** The session pool's `maxPoolSize` when the crawler sets none (10). */
    maxSessions?: number;
    /** Crawlee 4: sessions per site (2). */
    sessionsPerSite?: number;
    fetch?: typeof fetch;
}

/** What a report made of a crawling context: whether to lease again, why, and whether it was no page. */
export interface Verdict {
    leaseAgain: boolean;
    why: string;
    error?: boolean;
}

/** Crawlee and Playwright on proxy-operator's proxies. */
export class ProxyOperator {
    constructor(options: ProxyOperatorOptions);
    discovery: Discovery;
    keeper: LeaseKeeper;
    /** The signal that stopped `run`, if one did. */
    signalled: 'SIGINT' | 'SIGTERM' | undefined;
    /** Crawlee 3's `newUrlFunction`. */
    newUrlFunction: (sessionId: string | number | undefined, options?: { request?: { url: string } }) => Promise<string | null>;
    /** What the helper did: leases, releases, reports by result, waits on 409, API retries. */
    get stats(): LeaseKeeperStats & { apiRetries: number };
    /** Options for an HTTP crawler (HttpCrawler, CheerioCrawler, JSDOMCrawler) of `crawlee`. */
    crawlerOptions<T extends Record<string, any>>(crawlee: unknown, options?: T): T & Record<string, any>;
    /** Options for a browser crawler (PlaywrightCrawler): a context per page on its own lease. */
    browserCrawlerOptions<T extends Record<string, any>>(crawlee: unknown, options?: T): T & Record<string, any>;
    /** Crawlee 4: the session ID that pins a request for `url` to one of its site's sessions. */
    pin(url: string): string;
    /** Crawlee 4: `urls` as requests pinned to their sites' sessions. */
    requests(urls: string[]): { url: string; sessionId: string }[];
    /** The sizing rule: the most sessions a crawl of `sites` sites should keep. */
    poolSize(sites: number): Promise<number>;
    /** Reports what a crawling context saw. */
    report(context: unknown, error?: unknown): Promise<Verdict | null>;
    /** Runs the crawler and releases every lease however it ends. */
    run<R>(crawler: { run(requests?: any): Promise<R> }, requests?: unknown, options?: { exitOnSignal?: boolean }): Promise<R>;
    /** Releases every lease held, then every lease of the holder. */
    close(): Promise<boolean>;
    /** Releases every lease held (kept from 0.1: `close`). */
    releaseAll(): Promise<boolean>;
    /** Releases every lease when the crawler tears down. */
    releaseOnTeardown<C extends { teardown(...args: any[]): Promise<unknown> }>(crawler: C): C;
    /** Browser contexts of a Playwright `browser` on leased proxies, one per lease. */
    browserContexts(browser: any, options?: LeasedContextsOptions): LeasedContexts;
}
