"""A spider that crawls the URLs it is given through proxy-operator's proxies and prints one
JSON line per page and a summary: the e2e test `tests/tests/e2e/crawlers.rs` runs it with
`scrapy runspider`, and it is a working example of the middleware's settings.

    scrapy runspider spider.py -a urls="https://a.example/ https://b.example/" \\
        -s PROXY_OPERATOR_URL=http://proxy-operator-discovery:8090
"""

import json

import scrapy


class ProxiedSpider(scrapy.Spider):
    name = "proxied"
    # Let the spider see the statuses the middleware gave up on.
    handle_httpstatus_list = [401, 403, 407, 429, 500, 502, 503]
    custom_settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator_client.scrapy.ProxyOperatorMiddleware": 740},
        "CONCURRENT_REQUESTS": 1,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(self, urls: str = "", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = urls.split()

    def parse(self, response):
        print(json.dumps({
            "event": "page",
            "url": response.url,
            "status": response.status,
            "proxy": response.meta.get("proxy_operator_proxy"),
            "body": response.text[:40],
        }), flush=True)

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
        print(json.dumps({"event": "summary", "reason": reason, "proxy_operator": ours}), flush=True)
