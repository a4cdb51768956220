"""The built site as a reader sees it, in headless Chromium (Debian's chromium + chromedriver).

Every page of the site (discovered from docs/, see ``conftest.site_pages``) is loaded at a
desktop width (1280 px) and a phone width (390 px) and checked for:

* no horizontal overflow, with every folded block opened: the page never scrolls sideways, and nothing in the content column
  sticks out of it or scrolls sideways, except the elements meant to scroll (``SCROLLS``):
  at phone width only, a table too wide for the screen scrolls inside its own frame
  (Material's ``.md-typeset__scrollwrap``) and a row of tab labels scrolls
  (``.tabbed-labels``). Code blocks never scroll: they fit or wrap (docs/css/extra.css);
* no console errors (messages of level SEVERE in the browser log);
* every image loaded (``naturalWidth > 0``) and every inline figure drawn with a size;
* the copy button of every code block copying runnable code: no ``>>>``/``...``/``$`` prompts,
  no output, Python that compiles.

* no nested blockquotes and no ``>>>`` prompt in prose: an example outside a code fence (on
  a page, or in a docstring rendered without its ``Examples:`` heading) renders its ``>>>``
  as quotes inside quotes.

Then the search is asked for "perplexity" and must list results, and the API reference must
show its docstring examples as highlighted sessions.
"""

from __future__ import annotations

import time

import pytest

from _site import WIDTHS, set_width, site_pages

PAGES = site_pages()

SCROLLS = {1280: [], 390: [".md-typeset__scrollwrap", ".tabbed-labels"]}

_LAYOUT_JS = r"""
const allowed = arguments[0];
const problems = [];
// Folded blocks (??? note) are opened: a reader may open them, and they must fit too.
for (const d of document.querySelectorAll("article details")) d.open = true;
const describe = (el) => {
  let s = el.tagName.toLowerCase();
  if (typeof el.className === "string" && el.className.trim()) s += "." + el.className.trim().split(/\s+/).join(".");
  return s + ' "' + (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 70) + '"';
};
const de = document.documentElement;
if (de.scrollWidth > window.innerWidth + 1) problems.push(`the page is ${de.scrollWidth} px wide in a ${window.innerWidth} px window`);
const article = document.querySelector("article.md-content__inner");
if (!article) return ["no article.md-content__inner on the page"];
// The column is Material's content area (.md-content): the article's text plus the margins
// that tables, and at phone width code blocks and tab bars, run into by design.
const column = document.querySelector(".md-content");
const box = column.getBoundingClientRect();
const meant = (el) => allowed.some((sel) => el.matches(sel));
const clips = (cs) => ["auto", "scroll", "hidden", "clip"].includes(cs.overflowX);
const reported = new Set();
for (const el of article.querySelectorAll("*")) {
  const cs = getComputedStyle(el);
  if (cs.display === "none" || cs.visibility === "hidden") continue;
  if (clips(cs) && el.scrollWidth > el.clientWidth + 1 && !meant(el)) {
    problems.push(`scrolls sideways (${el.scrollWidth} px in ${el.clientWidth} px): ${describe(el)}`);
    reported.add(el);
  }
}
for (const el of article.querySelectorAll("*")) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) continue;
  let inside = false;
  for (let p = el.parentElement; p && p !== article; p = p.parentElement) {
    if (clips(getComputedStyle(p))) { inside = true; break; }
  }
  if (inside) continue;
  if (r.right > box.right + 2 || r.left < box.left - 2) {
    problems.push(`sticks out of the ${Math.round(box.width)} px column (${Math.round(r.left - box.left)}..${Math.round(r.right - box.left)} px): ${describe(el)}`);
  }
}
return problems;
"""

_IMAGES_JS = r"""
const bad = [];
for (const img of document.images) {
  if (!(img.complete && img.naturalWidth > 0)) bad.push("image not loaded: " + img.src.slice(0, 120));
}
for (const svg of document.querySelectorAll("article .gc-figure svg")) {
  const r = svg.getBoundingClientRect();
  const hidden = svg.closest(".tabbed-block") && getComputedStyle(svg.closest(".tabbed-block")).display === "none";
  if (!hidden && (r.width < 50 || r.height < 50)) bad.push(`figure drawn ${r.width}x${r.height} px`);
}
return bad;
"""

_COPY_JS = r"""
const copied = [];
const listener = () => {
  const a = document.activeElement;
  copied.push(a && a.value !== undefined ? a.value : String(document.getSelection()));
};
document.addEventListener("copy", listener, true);
// Material's clipboard code puts the text in a selected hidden textarea and calls
// execCommand("copy"), which headless Chromium refuses without a real user gesture: record
// what it was asked to copy instead.
const execCommand = document.execCommand;
document.execCommand = function (cmd, ...rest) {
  if (cmd === "copy") { listener(); return true; }
  return execCommand.call(document, cmd, ...rest);
};
const out = [];
for (const button of document.querySelectorAll("article button.md-clipboard, article button.md-code__button[data-md-type='copy']")) {
  const block = button.closest("div.highlight");
  const lang = [...block.classList].filter((c) => c.startsWith("language-")).map((c) => c.slice(9))[0] || "";
  const code = block.querySelector("code");
  copied.length = 0;
  button.click();
  out.push({lang: lang, shown: code.textContent, copied: copied.length ? copied[0] : null,
            signature: block.classList.contains("doc-signature")});
}
document.removeEventListener("copy", listener, true);
document.execCommand = execCommand;
return out;
"""


def _severe_logs(driver):
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _load(driver, url):
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url)
    for _ in range(100):
        if driver.execute_script("return document.readyState") == "complete":
            break
        time.sleep(0.05)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_page_fits_and_loads(driver, base_url, page, width):
    set_width(driver, width)
    _load(driver, base_url + page)
    problems = driver.execute_script(_LAYOUT_JS, SCROLLS[width])
    problems += driver.execute_script(_IMAGES_JS)
    problems += [f"console error: {m}" for m in _severe_logs(driver)]
    assert not problems, f"/{page} at {width} px:\n  " + "\n  ".join(problems)


def _code_lines(lang: str, shown: str):
    """What a reader would type from a session as shown: the prompted lines, prompts removed."""
    prompts = {"pycon": (">>> ", "... "), "console": ("$ ",)}[lang]
    lines = []
    for line in shown.splitlines():
        for p in prompts:
            if line.startswith(p) or line == p.rstrip():
                lines.append(line[len(p):])
                break
    return "\n".join(lines).rstrip()


@pytest.mark.parametrize("page", PAGES)
def test_copy_button_copies_runnable_code(driver, base_url, page):
    set_width(driver, 1280)
    _load(driver, base_url + page)
    blocks = driver.execute_script(_COPY_JS)
    n_code = driver.execute_script("return document.querySelectorAll('article div.highlight code').length;")
    problems = [] if len(blocks) == n_code else [f"{n_code} code blocks but {len(blocks)} copy buttons"]
    for i, b in enumerate(blocks):
        where = f"code block {i + 1} ({b['lang'] or 'plain'})"
        copied = b["copied"]
        if copied is None:
            problems.append(f"{where}: the copy button copied nothing")
            continue
        if b["lang"] in ("pycon", "console"):
            expected = _code_lines(b["lang"], b["shown"])
            if copied.rstrip() != expected:
                problems.append(f"{where}: copied\n{copied!r}\nexpected the code without prompts or output\n{expected!r}")
        elif copied.rstrip() != b["shown"].rstrip():
            problems.append(f"{where}: copied\n{copied!r}\nnot the code shown\n{b['shown']!r}")
        if b["lang"] in ("pycon", "python", "py") and not b["signature"]:
            try:
                compile(copied, f"{page}{where}", "exec")
            except SyntaxError as exc:
                problems.append(f"{where}: the copied code does not compile: {exc}\n{copied}")
    problems += [f"console error: {m}" for m in _severe_logs(driver)]
    assert not problems, f"/{page}:\n" + "\n".join(problems)


def test_every_page_is_tested(site_dir):
    built = sorted(p.parent.relative_to(site_dir).as_posix() for p in site_dir.rglob("index.html"))
    built = ["" if b == "." else b + "/" for b in built]
    assert built == sorted(PAGES)


def test_search_finds_perplexity(driver, base_url):
    from selenium.webdriver.common.by import By

    set_width(driver, 1280)
    _load(driver, base_url)
    driver.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-header__button[for='__search']")
    driver.execute_script("document.querySelector('#__search').checked = true;")
    box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    box.send_keys("perplexity")
    titles = []
    for _ in range(200):
        titles = driver.execute_script(
            "return [...document.querySelectorAll('.md-search-result__item')].map(e => e.textContent.trim().slice(0, 80));"
        )
        if titles:
            break
        time.sleep(0.05)
    assert titles, "the search lists nothing for 'perplexity'"
    assert not _severe_logs(driver)


_QUOTES_JS = r"""
const nested = [...document.querySelectorAll("article blockquote blockquote")]
  .map((e) => "nested blockquote: " + e.textContent.trim().replace(/\s+/g, " ").slice(0, 80));
// Prose that shows a prompt: its text without inline code (which may name ">>>" on purpose).
const prose = [...document.querySelectorAll("article p, article li, article blockquote")]
  .filter((e) => !e.closest(".highlight"))
  .filter((e) => {
    const c = e.cloneNode(true);
    for (const code of c.querySelectorAll("code")) code.remove();
    return c.textContent.includes(">>>");
  })
  .map((e) => "a >>> prompt in prose: " + e.textContent.trim().replace(/\s+/g, " ").slice(0, 80));
return nested.concat(prose);
"""


@pytest.mark.parametrize("page", PAGES)
def test_examples_are_code_blocks_not_quotes(driver, base_url, page):
    set_width(driver, 1280)
    _load(driver, base_url + page)
    problems = driver.execute_script(_QUOTES_JS)
    assert not problems, f"/{page}:\n  " + "\n  ".join(problems)


def test_quotes_check_fails_on_an_unfenced_example(driver, base_url):
    """The check above on a page built like the defect: a ``>>>`` line outside a fence, which
    Markdown renders as a blockquote nested in blockquotes."""
    set_width(driver, 1280)
    _load(driver, base_url)
    driver.execute_script(
        "const a = document.querySelector('article');"
        "const q = document.createElement('blockquote'); q.innerHTML = '<blockquote><p>&gt; sliding_windows(10, 4, 2)</p></blockquote>';"
        "a.appendChild(q);"
        "const p = document.createElement('p'); p.textContent = '>>> import gptcore'; a.appendChild(p);")
    problems = driver.execute_script(_QUOTES_JS)
    assert len(problems) == 2 and problems[0].startswith("nested blockquote") and "prompt in prose" in problems[1], problems


def test_api_reference_shows_its_examples_as_sessions(driver, base_url):
    set_width(driver, 1280)
    _load(driver, base_url + "api/")
    sessions = driver.execute_script("return document.querySelectorAll('article .language-pycon .gp').length;")
    assert sessions > 0, "the API page shows no highlighted >>> examples"
