"""A Playwright crawler (Python) on proxy-operator's proxies: `CRAWL_CONCURRENCY` pages at
once (default 8) in browser contexts on leased proxies, one context per lease, captcha pages
told apart by a ban check. It prints one JSON line per page and a summary; the e2e tests
`tests/tests/e2e/crawlers.rs` run it, and it is a working example of `LeasedContexts`.

    PROXY_OPERATOR_URL=http://proxy-operator-discovery:8090 PROXY_OPERATOR_TOKEN=... \\
        CRAWL_URLS_FILE=urls.txt python playwright_crawl.py

SIGINT and SIGTERM stop it (every lease released); `CRAWL_FAIL_AFTER=N` makes it fail
after N pages (the tests' crawler error). `CHROMIUM` names the browser (/usr/bin/chromium).
"""

import asyncio
import json
import os
import re
import signal
import sys

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright

from proxy_operator_client import Discovery
from proxy_operator_client.playwright import CHROMIUM_ARGS, LeasedContexts, NoProxy


def say(line):
    print(json.dumps(line), flush=True)


async def close(page):
    try:
        await page.close()
    except PlaywrightError:
        pass  # its context closed first


def is_ban_body(body, response):
    """From the body as it arrives: the proxy is done for the site before the page loads."""
    return 'id="captcha"' in body


async def crawl(contexts, url, attempts=20):
    """One page, through as many leases as it takes."""
    for _ in range(attempts):
        leased, page = await contexts.new_page(url)
        try:
            response = await page.goto(url, timeout=30_000, wait_until="domcontentloaded")
            html = await page.content()
        except PlaywrightError as error:
            await close(page)
            contexts.failed(leased)
            say({"event": "retry", "url": url, "error": str(error)[:200]})
            continue
        good = await contexts.judge(leased, response, page)
        await close(page)
        if good:
            marker = re.search(r"page:[^<]+", html)
            say({"event": "page", "url": url, "status": response.status, "proxy": leased.proxy,
                 "marker": marker.group() if marker else None})
            return True
    say({"event": "failed", "url": url})
    return False


async def main():
    with open(os.environ["CRAWL_URLS_FILE"]) as lines:
        urls = [line.strip() for line in lines if line.strip()]
    concurrency = int(os.environ.get("CRAWL_CONCURRENCY", "8"))
    fail_after = int(os.environ.get("CRAWL_FAIL_AFTER", "0"))
    discovery = Discovery(os.environ["PROXY_OPERATOR_URL"], os.environ.get("PROXY_OPERATOR_TOKEN"))
    queue = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    done = {"pages": 0}

    async def worker(contexts):
        while not queue.empty():
            url = queue.get_nowait()
            if await crawl(contexts, url):
                done["pages"] += 1
                if fail_after and done["pages"] >= fail_after:
                    raise RuntimeError(f"failing after {fail_after} pages, as asked")

    async with async_playwright() as playwright:
        # The crawler ends on SIGINT and SIGTERM (every lease released), not Playwright.
        browser = await playwright.chromium.launch(
            executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=CHROMIUM_ARGS,
            handle_sigint=False, handle_sigterm=False)
        contexts = LeasedContexts(browser, discovery, is_ban_body=is_ban_body,
                                  context_options={"ignore_https_errors": True})
        workers = [asyncio.ensure_future(worker(contexts)) for _ in range(concurrency)]
        stopped = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(signum, stopped.set)
        stopping = asyncio.ensure_future(stopped.wait())
        try:
            pending = {stopping, *workers}
            while pending != {stopping}:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if stopping in finished:
                    say({"event": "stopped"})
                    break
                for task in finished:
                    task.result()  # a worker's error ends the crawl
        except (NoProxy, RuntimeError) as error:
            say({"event": "error", "error": str(error)})
            return 1
        finally:
            for task in [stopping, *workers]:
                task.cancel()
            await asyncio.gather(stopping, *workers, return_exceptions=True)
            await contexts.close()
            await browser.close()
            say({"event": "summary", "pages": done["pages"], "no_match": contexts.stats.get("no_match", 0),
                 "proxy_operator": contexts.stats})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
