"""A spider that crawls the URLs it is given through proxy-operator's proxies, as a real crawl
would (8 requests at once, a ban policy for captcha pages), and prints one JSON line per
page and a summary: the e2e tests `tests/tests/e2e/crawlers.rs` run it with
`scrapy runspider`, and it is a working example of the middleware's settings.

    scrapy runspider spider.py -a urls_file=urls.txt \\
        -s PROXY_OPERATOR_URL=http://proxy-operator-discovery:8090

`-a fail_after=N` closes the spider with an error after N pages (the tests' crawler error).
"""

import json
import re

import scrapy
from scrapy.exceptions import CloseSpider


class CaptchaPages:
    """The ban policy: a page with a captcha form is a ban, whatever its status."""

    def response_is_ban(self, request, response):
        return b'id="captcha"' in response.body

    def exception_is_ban(self, request, exception):
        return False


class ProxiedSpider(scrapy.Spider):
    name = "proxied"
    # Let the spider see the statuses the middleware gave up on.
    handle_httpstatus_list = [401, 403, 407, 429, 500, 502, 503]
    custom_settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator_client.scrapy.ProxyOperatorMiddleware": 740},
        "PROXY_OPERATOR_BAN_POLICY": "spider.CaptchaPages",
        "CONCURRENT_REQUESTS": 8,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_TIMES": 5,
    }

    def __init__(self, urls: str = "", urls_file: str = "", fail_after: str = "0", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = urls.split()
        if urls_file:
            with open(urls_file) as lines:
                self.start_urls += [line.strip() for line in lines if line.strip()]
        self.fail_after = int(fail_after)
        self.pages = 0

    def parse(self, response):
        self.pages += 1
        marker = re.search(rb"page:[^<]+", response.body)
        print(json.dumps({
            "event": "page",
            "url": response.url,
            "status": response.status,
            "proxy": response.meta.get("proxy_operator_proxy"),
            "marker": marker.group().decode() if marker else None,
        }), flush=True)
        if self.fail_after and self.pages >= self.fail_after:
            raise CloseSpider("error")

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        # After spider_closed, whose handlers include the middleware's releases.
        crawler.signals.connect(spider.summary, signal=scrapy.signals.engine_stopped)
        return spider

    def summary(self):
        stats = self.crawler.stats.get_stats()
        ours = {k.removeprefix("proxy_operator/"): v for k, v in stats.items() if k.startswith("proxy_operator/")}
        reason = stats.get("finish_reason")
        print(json.dumps({"event": "summary", "reason": reason, "no_match": ours.get("no_match", 0),
                          "proxy_operator": ours}), flush=True)
