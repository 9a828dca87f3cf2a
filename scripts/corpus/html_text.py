"""Turns one HTML page of a manual (PostgreSQL's, git's) into the text a reader sees on it, with the
standard library's html.parser: no script, style or <head>, no navigation bars, tables of contents
or page footers, entities decoded; block elements separate words, inline elements do not.
"""

import html.parser

# Elements that never hold the page's text.
_HIDDEN = {"head", "script", "style", "noscript", "template"}
# Elements with no end tag: they are never open, so they never start a hidden region.
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
         "track", "wbr"}
# Elements whose end is a break between words.
_BLOCK = {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
          "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "ol", "p", "pre", "section",
          "table", "tbody", "td", "th", "thead", "tr", "ul"}


class HtmlTextError(Exception):
    pass


class _TextCollector(html.parser.HTMLParser):
    def __init__(self, hidden_classes, hidden_ids):
        super().__init__(convert_charrefs=True)
        self.hidden_classes, self.hidden_ids = hidden_classes, hidden_ids
        self.open = []     # [(tag, hides its content)] of the elements now open
        self.hidden = 0    # how many open elements hide their content
        self.parts = []

    def _hides(self, tag, attributes):
        if tag in _HIDDEN:
            return True
        attributes = dict(attributes)
        classes = set((attributes.get("class") or "").split())
        return bool(classes & self.hidden_classes) or attributes.get("id") in self.hidden_ids

    def handle_starttag(self, tag, attributes):
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag in _VOID:
            return
        hides = self._hides(tag, attributes)
        self.open.append((tag, hides))
        self.hidden += hides

    def handle_startendtag(self, tag, attributes):
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag in _VOID or not any(name == tag for name, _ in self.open):
            return  # a stray end tag: nothing to close
        while self.open:  # close it and whatever was left open inside it
            name, hides = self.open.pop()
            self.hidden -= hides
            if name == tag:
                break

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def page_text(page, hidden_classes=(), hidden_ids=(), name="page"):
    """The visible text of `page` (an HTML string); elements with one of `hidden_classes` or an id
    in `hidden_ids` are dropped with their content. Lines are broken at block elements."""
    collector = _TextCollector(set(hidden_classes), set(hidden_ids))
    collector.feed(page)
    collector.close()
    if not collector.parts:
        raise HtmlTextError(f"{name}: no text")
    return "".join(collector.parts)
