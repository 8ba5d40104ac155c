"""`quorumq dashboard` in a real headless browser (Debian's chromium): the page `quorumq up`
starts loads with no console errors, names each group's master and its slave's lag, and its
three actions (create a topic, send a test message, reset a group's offset) do what they say. The
failover case is in test_controller_failover.py, on its controller-mode group."""

import os

from selenium.webdriver.common.by import By

from harness import check_for, console_errors, headless_chromium, page_text
from quorumq.client import AdminClient, Blocking

SCREENSHOT = os.environ.get("QUORUMQ_DASHBOARD_SCREENSHOT")  # a path: the docs' picture is taken there


def act(browser, form: str, **fields: str) -> str:
    """Fill a form of the page, submit it and return what the page says of the result."""
    before = page_text(browser, "#action-result")
    for name, value in fields.items():
        field = browser.find_element(By.CSS_SELECTOR, f"#{form} [name={name}]")
        field.clear()
        field.send_keys(value)
    browser.find_element(By.CSS_SELECTOR, f"#{form} button").click()

    def answer() -> str | None:
        now = page_text(browser, "#action-result")
        return now if now and now != before else None
    return check_for(10, 0.1, answer, f"the answer to {form}")


def test_the_dashboard_shows_the_group_and_its_actions_work(start_cluster):
    cluster = start_cluster(replicas=2, dashboard=True)
    base = int(cluster["access_point"].rsplit(":", 1)[1])
    assert cluster["dashboard"] == f"http://127.0.0.1:{base + 9}/"
    _, master, slave = cluster["processes"]
    with headless_chromium() as browser:
        browser.get(cluster["dashboard"])
        check_for(10, 0.1, lambda: page_text(browser, '[data-group="broker-a"] [data-role="master"]')
                  == master["address"], "the master named")
        check_for(10, 0.1, lambda: "lag 0 B" in page_text(browser, f'[data-address="{slave["address"]}"]'),
                  "the slave's lag shown")

        assert act(browser, "create-topic", topic="DashTopic", queues="2") == \
            "topic DashTopic with 2 queues on broker-a"
        assert act(browser, "send-message", topic="DashTopic", body="from the page").startswith("SEND_OK broker-a")
        check_for(10, 0.2, lambda: page_text(browser, '[data-topic="DashTopic"]').startswith("DashTopic"),
                  "the topic listed with its rates")
        assert act(browser, "reset-offset", group="DashGroup", topic="DashTopic") == \
            "DashGroup on DashTopic reset on 1 master(s)"
        assert act(browser, "create-topic", topic="bad topic").startswith("ILLEGAL_TOPIC")
        if SCREENSHOT:
            browser.save_screenshot(SCREENSHOT)
        assert console_errors(browser) == []
    with Blocking(AdminClient, cluster["access_point"]) as admin:
        [progress] = admin.consumer_progress("DashGroup", "DashTopic")
    assert {queue.queue_id for queue in progress.queues} == {0, 1}
