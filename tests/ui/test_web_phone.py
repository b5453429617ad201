"""The web monitor on a phone's screen (touch, 390 px wide) and a desktop's, in Chromium.

The inbox is the first thing on both; on the phone an approval takes one tap and a
confirmation, and the fake agent's own log says it got the answer.
"""

from __future__ import annotations

import asyncio
import typing as t

from politerm.testing.retry import retry_until
from tests.loophelpers import started
from tests.ui.uihelpers import ask_project, base_and_token, browser, poli, screenshot_path, web

if t.TYPE_CHECKING:
    import pathlib

    import libtmux
    from playwright.async_api import Page

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True,
         "device_scale_factor": 2}  # fmt: skip
DESKTOP = {"viewport": {"width": 1500, "height": 1000}}


async def _inbox_first(page: Page) -> t.Any:
    """The inbox's box, after checking it is the page's first section and nothing is wider."""
    first = await page.evaluate("() => document.querySelector('main > section').id")
    assert first == "inbox-section"
    box = await page.locator("#inbox-section").bounding_box()
    assert box is not None
    header = await page.locator("header").bounding_box()
    assert header is not None
    assert box["y"] <= header["y"] + header["height"] + 40  # right under the header
    wide = await page.evaluate("() => document.documentElement.scrollWidth - innerWidth")
    assert wide <= 0, f"the page is {wide}px wider than the screen"
    return box


async def test_phone_sees_the_inbox_first_and_approves_with_one_tap_and_a_confirm(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    assert server.socket_name is not None
    root = tmp_path / "proj"
    ask_project(root, server.socket_name)
    async with started(root) as loop, browser() as b:
        with web(root, "--allow-actions") as url:
            base, token = base_and_token(url)
            phone = await (await b.new_context(**PHONE)).new_page()  # type: ignore[arg-type]
            desk = await (await b.new_context(**DESKTOP)).new_page()  # type: ignore[arg-type]
            for page in (phone, desk):
                await page.goto(f"{base}/?token={token}")
            router = poli(root, "task", "make hello", "--id", "T-phone", "--timeout", "90")
            try:
                approve = phone.locator("#inbox li.kind-approval button.approve")
                await approve.wait_for(state="visible", timeout=60_000)
                await desk.locator("#inbox li.kind-approval").wait_for(timeout=30_000)
                box = await _inbox_first(desk)
                shot = await desk.screenshot(path=str(screenshot_path(tmp_path, "web-desk.png")))
                assert shot[:8] == b"\x89PNG\r\n\x1a\n" and box["width"] > 1000
                box = await _inbox_first(phone)
                assert box["width"] <= 390
                item = phone.locator("#inbox li.kind-approval")
                assert "echo hi > out.txt" in await item.inner_text()
                assert "proj" in await item.locator(".where").inner_text()
                tap = await approve.bounding_box()
                assert tap is not None and tap["height"] >= 44  # a thumb hits it
                assert tap["y"] + tap["height"] <= PHONE["viewport"]["height"]  # type: ignore[index]
                path = screenshot_path(tmp_path, "web-phone.png")
                shot = await phone.screenshot(path=str(path))
                assert int.from_bytes(shot[16:20], "big") == 390 * 2  # PNG width: the phone's
                await approve.tap()
                confirm = phone.locator("#confirm")
                await confirm.wait_for(state="visible", timeout=5_000)
                assert "echo hi > out.txt" in await confirm.inner_text()
                assert loop.store.get_meta("approval:EXECUTER")  # nothing sent before "yes"
                await phone.locator("#confirm button.yes").tap()
                await asyncio.to_thread(
                    retry_until,
                    lambda: (root / "executer" / "out.txt").is_file(),
                    60,
                    what="the executer wrote out.txt after the phone's approval",
                )
                out, err = await asyncio.to_thread(router.communicate, None, 90)
                assert router.returncode == 0, (out, err)
            finally:
                if router.poll() is None:
                    router.kill()
            # ground truth: the fake agent's own log has the approval keys it received
            approvals = [e for e in loop.log("EXECUTER") if e["event"] == "approval"]
            assert approvals and approvals[-1]["approved"] is True, approvals
            await phone.locator("#inbox li.none").wait_for(timeout=30_000)
            # the live pane scrolls inside its own frame; the page itself stays phone-wide
            await phone.goto(f"{base}/agent/EXECUTER")
            await phone.wait_for_function("() => window.poliFrames > 0", timeout=30_000)
            frame = await phone.evaluate(
                "() => { const f = document.getElementById('terminal');"
                " return [f.scrollWidth, f.clientWidth,"
                " document.documentElement.scrollWidth - innerWidth]; }"
            )
            assert frame[0] > frame[1] and frame[2] <= 0, frame
