"""The web mirror is full fidelity: colours, attributes, cursor and the alternate screen,
from the first screen (a capture with ``-e``) and from the live ``%output`` bytes after it."""

from __future__ import annotations

import subprocess
import typing as t

import pytest

from politerm.testing.retry import retry_until
from tests.ui.uihelpers import base_and_token, browser, screenshot_path, web

if t.TYPE_CHECKING:
    import pathlib

    import libtmux
    from playwright.async_api import Page

# Red text on the normal screen, then the alternate screen with green text and the cursor
# parked at row 5, column 10; on "go", bold blue text arrives live; on "leave", back to the
# normal screen (which the mirror painted from ``capture-pane -a`` underneath).
SCRIPT = r"""
printf '\033[31mRED-NORMAL\033[0m\r\n'
printf '\033[?1049h\033[H\033[2J\033[3;1H\033[32mGREEN-ALT\033[0m\033[5;10H'
touch drawn
while [ ! -e go ]; do sleep 0.05; done
printf '\033[1;34mBLUE-LIVE\033[0m'
while [ ! -e leave ]; do sleep 0.05; done
printf '\033[?1049l'
sleep 600
"""

# The cell where ``text`` starts on the active buffer: its colour, bold, and the cursor.
CELL = """(text) => {
    const b = window.poliTerm.buffer.active;
    for (let y = 0; y < b.length; y++) {
        const line = b.getLine(y);
        const x = line ? line.translateToString().indexOf(text) : -1;
        if (x >= 0) {
            const c = line.getCell(x);
            return {type: b.type, y: y - b.viewportY, fg: c.getFgColor(),
                    palette: c.isFgPalette() !== 0, bold: c.isBold() !== 0,
                    cursor: [b.cursorX, b.cursorY]};
        }
    }
    return null;
}"""


async def _cell(page: Page, text: str) -> dict[str, t.Any]:
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await page.wait_for_function(f"(t) => ({CELL})(t) !== null", arg=text, timeout=15_000)
    except PlaywrightTimeout:
        shown = await page.evaluate("() => window.poliTerm?.buffer.active.type")
        pytest.fail(f"{text!r} did not show in xterm.js's {shown} buffer within 15 s")
    return t.cast("dict[str, t.Any]", await page.evaluate(CELL, text))


def _agent_session(
    server: libtmux.Server, root: pathlib.Path, script: str, cols: int = 80, rows: int = 24
) -> None:
    """Project ``root`` with session ``ours`` running ``script`` in a pane tagged agent A1;
    returns once the script has drawn its screen."""
    socket = server.socket_name
    assert socket is not None
    root.mkdir()
    (root / "poli.toml").write_text(
        f'[tmux]\nsocket = "{socket}"\n\n[store]\npath = "r.sqlite3"\n\n[notify]\ndesktop = false\n'
    )
    (root / "draw.sh").write_text(script)
    tmux = ["tmux", "-L", socket]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "ours", "-x", str(cols), "-y", str(rows),
         "-c", str(root), "sh draw.sh"],
        check=True,
    )  # fmt: skip
    subprocess.run([*tmux, "set-option", "-p", "-t", "ours", "@poli_agent", "A1"], check=True)
    subprocess.run([*tmux, "set-option", "-t", "ours", "@poli_project", str(root)], check=True)
    retry_until(lambda: (root / "drawn").exists(), 30, what="the script's screen")


async def test_colours_cursor_and_alternate_screen_reach_xterm(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    _agent_session(server, root, SCRIPT)
    async with browser() as b:
        with web(root) as url:
            base, token = base_and_token(url)
            page = await b.new_page(viewport={"width": 1200, "height": 800})
            await page.goto(f"{base}/agent/A1?token={token}")
            # the first screen, painted from the capture: alternate screen, green, cursor
            green = await _cell(page, "GREEN-ALT")
            assert green["type"] == "alternate", green
            assert (green["y"], green["palette"], green["fg"]) == (2, True, 2), green
            assert green["cursor"] == [9, 4], green
            # the normal screen underneath is not on the alternate one
            assert await page.evaluate(CELL, "RED-NORMAL") is None
            # then the live bytes: bold blue where the cursor was
            (root / "go").touch()
            blue = await _cell(page, "BLUE-LIVE")
            assert (blue["type"], blue["y"]) == ("alternate", 4), blue
            assert (blue["palette"], blue["fg"], blue["bold"]) == (True, 4, True), blue
            assert blue["cursor"] == [18, 4], blue
            (root / "leave").touch()
            red = await _cell(page, "RED-NORMAL")
            assert (red["type"], red["y"]) == ("normal", 0), red
            assert (red["palette"], red["fg"]) == (True, 1), red


# A 200-column screen: a ruler across the whole width, a box, and Claude's ``⎿`` answer mark.
WIDE = r"""
i=0; while [ $i -lt 20 ]; do printf '%s' "$i.........." | cut -c1-10 | tr -d '\n'; i=$((i+1)); done
printf '\r\n┌────┐\r\n│ ok │\r\n└────┘\r\n  ⎿  Done-WIDE\r\n'
touch drawn
sleep 600
"""

# Whether ``ch`` drawn in the terminal's font differs from what a glyph no font has draws
# (the missing-glyph box): pixel for pixel on a canvas, after the page's fonts loaded.
GLYPH_DRAWN = """async (ch) => {
    await document.fonts.ready;
    const font = "26px " + window.poliTerm.options.fontFamily;
    const draw = (text) => {
        const c = document.createElement("canvas");
        c.width = 40; c.height = 40;
        const g = c.getContext("2d");
        g.font = font; g.fillStyle = "#fff"; g.textBaseline = "top";
        g.fillText(text, 4, 4);
        return Array.from(g.getImageData(0, 0, 40, 40).data).join(",");
    };
    const blank = draw(" ");
    const glyph = draw(ch);
    return glyph !== blank && glyph !== draw("\\u{10FFFD}");
}"""


async def test_a_wide_pane_scrolls_in_its_frame_and_its_glyphs_have_a_font(
    server: libtmux.Server, tmp_path: pathlib.Path
) -> None:
    root = tmp_path / "proj"
    _agent_session(server, root, WIDE, cols=200, rows=30)
    async with browser() as b:
        with web(root) as url:
            base, token = base_and_token(url)
            for width in (1200, 390):  # a desktop window and a phone
                page = await b.new_page(viewport={"width": width, "height": 800})
                await page.goto(f"{base}/agent/A1?token={token}")
                await _cell(page, "Done-WIDE")
                assert await page.evaluate("() => window.poliTerm.cols") == 200
                # the page itself does not overflow to the right; the pane's frame scrolls
                sizes = await page.evaluate(
                    """() => {
                        const f = document.getElementById("terminal");
                        return {page: document.documentElement.scrollWidth,
                                view: window.innerWidth,
                                frame: f.clientWidth, inner: f.scrollWidth};
                    }"""
                )
                assert sizes["page"] <= sizes["view"], sizes
                assert sizes["inner"] > sizes["frame"], sizes
                await page.screenshot(path=str(screenshot_path(tmp_path, f"web-wide-{width}.png")))
                # its right end is reachable by scrolling the frame
                await page.evaluate(
                    "() => { const f = document.getElementById('terminal');"
                    " f.scrollLeft = f.scrollWidth; }"
                )
                assert (
                    await page.evaluate("() => document.getElementById('terminal').scrollLeft")
                    == sizes["inner"] - sizes["frame"]
                )
                # box drawing and ⎿ are drawn by a font, not as the missing-glyph box
                for ch in ("⎿", "┌", "─", "│", "└"):
                    assert await page.evaluate(GLYPH_DRAWN, ch), f"{ch} has no glyph"
                await page.close()
